"""The int8-activation Q4_K kernels (gemv_int8.py) against float64 and exact int8 references
(int8_cases.py): compiled on CUDA at the 7B shapes and odd ones (M = 1, 3, 17, 64; K not a multiple
of a pass; M = 2..16 rows through NT tokens per program at the 7B shapes), and under TRITON_INTERPRET=1
on the CPU (M = 1, 2, 3, 5, 8, 9: NT = 1, 2, 4, 8 and last programs with fewer tokens)."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from int8_cases import gemv3_cases, gemv_cases, glu_cases, quant_cases
from interp_run import check_under_interpreter, interpreter_only

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
MS = [1, 3, 17, 64]
BIG_MS = [1, 2, 3, 8, 16]  # the decode batches the multi-token programs are for


def _check(cases):
    bad = [(name, err, tol) for name, err, tol in cases if not err < tol]
    assert not bad, bad


@interpreter_only
def test_int8_kernels_under_interpreter():
    check_under_interpreter("interp_int8.py", cases=46, timeout=240)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_x_cuda(dtype):
    _check(quant_cases("cuda", [96, 3584, 18944], MS, dtype))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape", [(512, 3584), (3584, 3584), (37, 768), (3584, 18944)])
def test_gemv_q4k_i8_cuda(shape):
    _check(gemv_cases("cuda", [shape], MS if shape[0] < 3584 else BIG_MS))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape", [(512, 3584), (21, 768), (3584, 18944), (152064, 3584)])
def test_gemv_q6k_i8_cuda(shape):
    ms = MS if shape[0] < 3584 else BIG_MS if shape[0] < 100_000 else [1, 8]  # LM head: CPU reference time
    _check(gemv_cases("cuda", [shape], ms, qt=T.Q6_K))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q6_K])
@pytest.mark.parametrize("splits", [2, 3, 8])
def test_gemv_i8_k_split_cuda(qt, splits):
    """The 7B down's shape with K split explicitly (launch's fifth entry), one row and three (NT 4)."""
    g = 64 if qt == T.Q4_K else 8
    _check(gemv_cases("cuda", [(3584, 18944)], [1], qt=qt, launch=(g, 4, 4, 1, splits)))
    _check(gemv_cases("cuda", [(3584, 18944)], [3], qt=qt, launch=(g, 4, 4, 4, splits)))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape", [(64, 768), (18944, 3584)])
def test_glu_q4k_i8_cuda(shape):
    _check(glu_cases("cuda", [shape], MS if shape[0] < 1024 else [1, 8]))


@pytest.mark.gpu
@cuda
def test_gemv_q4k_i8_bf16_out():
    _check(gemv_cases("cuda", [(512, 3584)], [1, 3], torch.bfloat16))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("qv", [T.Q4_K, T.Q6_K])
def test_gemv3_i8_cuda(qv):
    _check(gemv3_cases("cuda", [3584, 512, 512], 3584, [T.Q4_K, T.Q4_K, qv], MS, torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_decoder_int8_x_not_for_float32(tmp_path, dtype):
    """float32 models are run for exactness: FusedDecoder keeps float x for them whatever int8_x says."""
    pytest.importorskip("triton")
    from orcd.cli.synth import synth_like
    from orcd.loading.loader import load_model
    from orcd.quant.kernels.fused_linear import GEMV_MAX_N
    from orcd.runner.fused_decode import I8_MAX_ROWS, FusedDecoder

    path, _ = synth_like(str(tmp_path / "m.gguf"), "tiny-qwen2-256", "Q4_K_M")
    model = load_model(path, "cpu", dtype=dtype, tokenizer=False).model
    assert FusedDecoder(model).int8_x == (dtype != torch.float32)
    assert FusedDecoder(model).int8_attn == (dtype != torch.float32)
    assert not FusedDecoder(model, int8_x=False).int8_x
    # every product Q4_K/Q6_K (Q6_K head): int8 multi-token GEMVs up to I8_MAX_ROWS rows, else the float
    # GEMVs' GEMV_MAX_N
    dec = FusedDecoder(model)
    assert dec.fused_rows() == (I8_MAX_ROWS if dtype != torch.float32 else GEMV_MAX_N)
    dec.int8_attn = False
    assert dec.fused_rows() == GEMV_MAX_N
