"""Run under TRITON_INTERPRET=1 (by test_q6k_split_mm.py): the tensor-core batched kernels and the float
GEMV on Q6_K in the split layout (layout.split_q6_k) against the same kernel on GGUF's blocks, and a
split QuantLinear's forward against the GGUF one's at 1, 4, 8, 64 and 65 rows. Prints `name 0
0` where the outputs are equal (torch.equal: the same values in the same arithmetic order), `name inf 0`
where not. x in float32 and float16 (the interpreter's bf16 tl.dot
is not usable); out not a multiple of the tile; K = 512 (2 super-blocks: split-K runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks  # noqa: E402

from orcd.quant.kernels.batched_fused import batched_fused  # noqa: E402
from orcd.quant.kernels.batched_linear import batched_linear  # noqa: E402
from orcd.quant.kernels.batched_qkv import batched_qkv  # noqa: E402
from orcd.quant.kernels.fused_linear import fused_glu, fused_linear, launch_gemv  # noqa: E402
from orcd.quant.kernels.invariant_linear import invariant_linear  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402
from orcd.quant.kernels.q6k_split import split_linear  # noqa: E402
from orcd.quant.linear import QuantLinear  # noqa: E402

K = 512


def same(got: torch.Tensor, want: torch.Tensor) -> float:
    """0 where torch.equal, else inf (a NaN or a dtype mismatch is a difference too; so is an all-zero
    output: a check of nothing)."""
    if (got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want)
            or not bool(want.abs().max() > 0)):
        return float("inf")
    return 0.0


def mm_cases():
    """batched_linear (8 rows fp16 with bias; 5 fp32, K split in 2) and batched_fused (norm + residual,
    and the SwiGLU) at 6 rows."""
    raw, up = random_blocks(T.Q6_K, 40, K, 1), random_blocks(T.Q6_K, 40, K, 2)
    sp, sup = split_q6_k(raw), split_q6_k(up)
    for m, dt, target in ((8, torch.float16, 1), (5, torch.float32, 64)):
        torch.manual_seed(m)
        x, bias = torch.randn(m, K).to(dt), torch.randn(40).to(dt)
        want = batched_linear(x, raw, 40, K, T.Q6_K, bias, launch=(16, 4, 1), target=target)
        got = batched_linear(x, sp, 40, K, T.Q6_K, bias, launch=(16, 4, 1), target=target, split=True)
        yield f"batched_linear_m{m}_{str(dt)[6:]}", same(got, want)
    x, nrm = torch.randn(6, K).half(), (torch.rand(K).half() + 0.5, 1e-6)
    res = torch.randn(6, 40).half()
    want = batched_fused(x, raw, 40, K, T.Q6_K, nrm, res.clone(), launch=(16, 4, 1), target=64)
    got = batched_fused(x, sp, 40, K, T.Q6_K, nrm, res.clone(), launch=(16, 4, 1), target=64, split=True)
    yield "batched_fused_norm_res", same(got, want)
    want = batched_fused(x, raw, 40, K, T.Q6_K, nrm, raw_up=up, launch=(16, 4, 1))
    got = batched_fused(x, sp, 40, K, T.Q6_K, nrm, raw_up=sup, launch=(16, 4, 1), split=True)
    yield "batched_fused_glu", same(got, want)


def gemv_cases():
    """The float GEMV: launch_gemv with K split in 2 (norm, residual), fused_glu at 2 rows."""
    raw, up = random_blocks(T.Q6_K, 21, K, 7), random_blocks(T.Q6_K, 21, K, 8)
    x, nrm, res = torch.randn(3, K).half(), (torch.rand(K).half() + 0.5, 1e-6), torch.randn(3, 21).half()
    ys = [res.clone(), res.clone()]
    launch_gemv(x, raw, ys[0], T.Q6_K, 21, K, 2, 4, 1, 2, norm=nrm, res=True)
    launch_gemv(x, split_q6_k(raw), ys[1], T.Q6_K, 21, K, 2, 4, 1, 2, norm=nrm, res=True, split=True)
    yield "gemv_splitk_norm_res", same(ys[1], ys[0])
    want = fused_glu(x[:2], raw, up, 21, K, T.Q6_K, nrm)
    got = fused_glu(x[:2], split_q6_k(raw), split_q6_k(up), 21, K, T.Q6_K, nrm, split=True)
    yield "fused_glu_m2", same(got, want)


def qkv_cases():
    """batched_qkv with q, k Q4_K and v Q6_K split (qwen2's biases), 7 fp16 rows, K split in 2."""
    types, outs = (T.Q4_K, T.Q4_K, T.Q6_K), (40, 24, 24)
    raws = [random_blocks(t, o, K, 20 + j) for j, (t, o) in enumerate(zip(types, outs, strict=True))]
    x = torch.randn(7, K).half()
    gguf = [(r, o, t, torch.randn(o).half()) for r, o, t in zip(raws, outs, types, strict=True)]
    want = batched_qkv(x, gguf, K, launch=(16, 4, 1), target=64)
    ws = [*gguf[:2], (split_q6_k(raws[2]), *gguf[2][1:])]
    got = batched_qkv(x, ws, K, launch=(16, 4, 1), target=64, split=(False, False, True))
    yield "batched_qkv_ggs", max(map(same, got, want))


def invariant_cases():
    """The batch-invariant GEMM (invariant_linear: a split QuantLinear's on CUDA), 5 rows, fp16 and fp32
    (split in 2 along K)."""
    raw = random_blocks(T.Q6_K, 40, K, 9)
    for dt in (torch.float16, torch.float32):
        x, bias = torch.randn(5, K).to(dt), torch.randn(40).to(dt)
        want = invariant_linear(x, raw, int(T.Q6_K), 40, bias)
        yield f"invariant_{str(dt)[6:]}", same(invariant_linear(x, split_q6_k(raw), int(T.Q6_K), 40, bias,
                                                                split=True), want)


def linear_cases():
    """split_linear == fused_linear (bias inside) and a split QuantLinear == a GGUF one (bias after) at
    1 and 4 rows (the float GEMV), 8 and 64 (not routed at this size: dequantize + GEMM), 65."""
    raw = random_blocks(T.Q6_K, 21, K, 4)
    bias = torch.randn(21).half()
    gguf = QuantLinear(21, K, T.Q6_K, torch.float16, raw=raw, bias=bias)
    lin = QuantLinear(21, K, T.Q6_K, torch.float16, raw=raw.clone(), bias=bias)
    lin.to_split()
    for m in (1, 4, 8, 64, 65):
        torch.manual_seed(100 + m)
        x = torch.randn(m, K).half()
        yield f"split_linear_m{m}", same(split_linear(x, lin.raw, 21, K, bias),
                                         fused_linear(x, raw, 21, K, T.Q6_K, bias))
        yield f"quant_linear_m{m}", same(lin(x), gguf(x))


if __name__ == "__main__":
    for name, err in (*mm_cases(), *gemv_cases(), *qkv_cases(), *invariant_cases(), *linear_cases()):
        print(name, f"{err:.3e}", 0, flush=True)
