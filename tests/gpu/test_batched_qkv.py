"""batched_qkv (q/k/v of 5..64 decode rows in one launch) against gguf's dequantize and a float64 matmul:
on CUDA at Qwen2.5-7B's Q4_K_M shapes, on the CPU under the Triton interpreter (interp_batched_qkv.py;
the FusedDecoder step: interp_batched_qkv_step.py)."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from interp_run import check_under_interpreter, interpreter_only, run_under_interpreter

from orcd.quant.dequant import dequantize

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# 7B Q4_K_M: q 3584 x 3584 and k 512 x 3584 Q4_K; v 512 x 3584 Q6_K in half the layers, Q4_K in the rest
SETS_7B = {"q4q4q6": [(T.Q4_K, 3584), (T.Q4_K, 512), (T.Q6_K, 512)],
           "q4q4q4": [(T.Q4_K, 3584), (T.Q4_K, 512), (T.Q4_K, 512)]}


@interpreter_only
def test_batched_qkv_under_interpreter():
    check_under_interpreter("interp_batched_qkv.py", cases=108)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", list(SETS_7B))
@pytest.mark.parametrize("m", [5, 8, 33, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_batched_qkv_matches_dequantize(name, m, dtype):
    from orcd.quant.kernels.batched_qkv import batched_qkv

    k = 3584
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    weights = [(random_blocks(qt, n, k, seed=m + 7 * j).cuda(), n, qt,
                torch.randn(n, device="cuda", generator=g).to(dtype))
               for j, (qt, n) in enumerate(SETS_7B[name])]
    ys = batched_qkv(x, weights, k)
    for y, (raw, n, qt, bias) in zip(ys, weights, strict=True):
        ref = x.double() @ dequantize(raw, qt, (n, k)).double().T + bias.double()
        assert y.shape == (m, n) and y.dtype == dtype and y.is_contiguous()
        assert rel_err(y, ref) < TOL[dtype]


@pytest.mark.gpu
@needs_cuda
def test_batched_qkv_repeatable_with_split_k():
    """Split-K partials are summed in split order: two runs are bit-identical."""
    from orcd.quant.kernels.batched_qkv import batched_qkv

    weights = [(random_blocks(qt, n, 3584, seed=j).cuda(), n, qt, None)
               for j, (qt, n) in enumerate(SETS_7B["q4q4q6"])]
    x = torch.randn(8, 3584, device="cuda", dtype=torch.bfloat16)
    for a, b in zip(batched_qkv(x, weights, 3584), batched_qkv(x, weights, 3584), strict=True):
        assert torch.equal(a, b)


@interpreter_only
def test_fused_decoder_batched_qkv_under_interpreter():
    """The unfused 5-row step with q/k/v in one launch == the dequantized model (float32, q/k/v biases)."""
    (name, err, tol), (label, calls) = run_under_interpreter("interp_batched_qkv_step.py", timeout=300)
    assert name == "batched_qkv_batch5" and float(err) < float(tol)
    assert label == "batched_qkv_calls" and int(calls) > 0
