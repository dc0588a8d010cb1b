"""batched_fused (the norm-fused decode step's products at 5..64 rows: RMSNorm of x, residual add, SwiGLU,
one pass over raw blocks) against the float64 torch reference of the same rounding steps: on CUDA at the
0.5B / Gemma 3 270M / 7B k/v shapes and odd shapes, on the CPU under the Triton interpreter; and
fused_gemv / fused_glu sending their 5..64-row fusions there."""

from __future__ import annotations

import pytest
import torch
from fused_cases import fused_reference
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from interp_run import check_under_interpreter, interpreter_only, run_under_interpreter

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# (type, out, in): 0.5B q/o, gate/up, down (Q4_K and Q6_K); Gemma 3 270M o and down; 7B k/v; odd: out
# not a multiple of BN, K = 5 blocks of 32 (not a multiple of the 128-input step)
SHAPES = [(T.Q5_0, 896, 896), (T.Q5_0, 4864, 896), (T.Q4_K, 896, 4864), (T.Q6_K, 896, 4864),
          (T.Q4_K, 640, 1024), (T.Q6_K, 640, 2048), (T.Q4_K, 512, 3584), (T.Q8_0, 301, 160),
          (T.Q5_0, 130, 160)]
TOL = {torch.bfloat16: 1e-2, torch.float32: 1e-5}


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt,n,k", SHAPES, ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("m", [5, 8, 17, 64])
@pytest.mark.parametrize("mode", ["norm", "res", "glu", "gelu"])
def test_batched_fused_matches_reference(qt, n, k, m, mode):
    from orcd.quant.kernels.batched_fused import batched_fused

    dt = torch.float32 if m == 17 else torch.bfloat16
    raw = random_blocks(qt, n, k, seed=m * 31 + n).cuda()
    up = random_blocks(qt, n, k, seed=m * 31 + n + 1).cuda() if mode in ("glu", "gelu") else None
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(dt)
    norm = ((torch.rand(k, device="cuda", generator=g) * 0.05 + 0.05).to(dt), 1e-6) if mode != "res" else None
    res = torch.randn(m, n, device="cuda", generator=g).to(dt) if mode == "res" else None
    bias = torch.randn(n, device="cuda", generator=g).to(dt) if mode == "norm" and m == 5 else None
    gelu = mode == "gelu"
    ref = fused_reference(x, raw, qt, n, k, norm, res.clone() if res is not None else None, up, bias, gelu)
    y = batched_fused(x, raw, n, k, qt, norm=norm, residual=res, raw_up=up, bias=bias, gelu=gelu)
    assert y.shape == (m, n) and y.dtype == dt and (res is None or y is res)
    assert rel_err(y, ref) < TOL[dt]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [5, 8, 64])
def test_fused_gemv_and_glu_route_batches(m):
    """fused_gemv (norm, residual) and fused_glu above GEMV_MAX_N rows: bit for bit batched_fused."""
    from orcd.quant.kernels.batched_fused import batched_fused
    from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu

    qt, n, k = T.Q5_0, 896, 896
    raw, up = random_blocks(qt, n, k, seed=1).cuda(), random_blocks(qt, n, k, seed=2).cuda()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    norm = (torch.rand(k, device="cuda", dtype=torch.bfloat16), 1e-6)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(fused_gemv(x, raw, n, k, qt, b, norm=norm),
                       batched_fused(x, raw, n, k, qt, norm, bias=b))
    assert torch.equal(fused_glu(x, raw, up, n, k, qt, norm=norm),
                       batched_fused(x, raw, n, k, qt, norm=norm, raw_up=up))
    assert torch.equal(fused_glu(x, raw, up, n, k, qt, gelu=True), batched_fused(x, raw, n, k, qt, raw_up=up,
                                                                                   gelu=True))
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    want = batched_fused(x, raw, n, k, qt, residual=res.clone())
    assert torch.equal(fused_gemv(x, raw, n, k, qt, residual=res), want)


def test_fused_gemv_refuses_fusions_above_mm_max_n():
    from orcd.quant.kernels.fused_linear import MM_MAX_N, fused_gemv

    x = torch.zeros(MM_MAX_N + 1, 32)
    raw = torch.zeros(4, 34, dtype=torch.uint8)
    with pytest.raises(ValueError, match="decode batches"):
        fused_gemv(x, raw, 4, 32, T.Q8_0, residual=torch.zeros(MM_MAX_N + 1, 4))


@interpreter_only
def test_batched_fused_under_interpreter():
    check_under_interpreter("interp_batched_fused.py", cases=24)


@interpreter_only
def test_fused_decode_step_at_5_rows_under_interpreter():
    """FusedDecoder's norm-fused step with fused_rows switched to 64 (the change its owner may make for
    models whose products all run on batched_fused) matches the dequantized forward at 5 rows."""
    (name, err, tol), (label, calls) = run_under_interpreter("interp_fused_rows.py", timeout=300)
    assert float(err) < float(tol), name
    assert label == "batched_fused_calls" and int(calls) > 0


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("rows", [6, 17])
@pytest.mark.parametrize("quant", ["Q8_0", "Q4_K_M"])
@torch.inference_mode()
def test_fused_decode_step_above_gemv_rows(tmp_path, monkeypatch, quant, rows):
    """The norm-fused decode step at 6 and 17 rows on batched_fused (fused_rows switched to 64, float x)
    against model.forward + compute_logits, bf16, four steps."""
    from orcd.cli.synth import synth_like
    from orcd.loading.loader import load_model
    from orcd.models.kv_cache import KVCache
    from orcd.models.layers.attention import AttnMetadata
    from orcd.runner.fused_decode import FusedDecoder

    monkeypatch.setattr(FusedDecoder, "fused_rows", lambda self: 64)
    like = "tiny-qwen2" if quant == "Q8_0" else "tiny-qwen2-256"  # K-quants need widths % 256 == 0
    path, _ = synth_like(str(tmp_path / "m.gguf"), like, quant)
    loaded = load_model(path, "cuda", tokenizer=False, q6k_layout="gguf")  # float x reads GGUF blocks only
    model = loaded.model
    kv = KVCache.allocate(loaded.cfg, 8 * rows, 16, "cuda", loaded.dtype)
    tables = torch.arange(8 * rows, dtype=torch.int32, device="cuda").view(rows, 8)
    fused = FusedDecoder(model, int8_x=False)
    pos = torch.arange(rows, device="cuda") * 5 % 100
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(4):
        slots = tables.gather(1, (pos // 16)[:, None].int()).view(-1).long() * 16 + pos % 16
        meta = AttnMetadata(cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32, device="cuda"),
                            seq_lens=(pos + 1).int(), block_tables=tables, slot_mapping=slots,
                            max_query_len=1, max_seq_len=int(pos.max()) + 1)
        ids = torch.randint(0, loaded.cfg.vocab_size, (rows,), device="cuda", generator=gen)
        out = fused(ids, pos, meta, kv)
        ref = model.compute_logits(model(ids, pos, meta, kv))
        assert float((out - ref).norm() / ref.norm()) < 5e-2  # bf16 at other points (test_fused_decode.py)
        pos = pos + 1
