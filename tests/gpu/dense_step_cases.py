"""Cases for the dense decode step's small kernels, run under the Triton interpreter on the CPU (this file
as a script, by test_dense_step_kernels.py) or compiled on CUDA (imported): prints `name err tol` lines.
  - silu_mul: decode_ops.silu_mul over a stacked gate|up product against F.silu(gate) * up;
  - attention over q columns of one q|k|v product (rows apart) against the same q made contiguous: the
    kernel reads q by its strides, so the two must agree (bit for bit under the interpreter)."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

CASES = 5  # lines cases() prints


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def silu_mul_checks(device: str):
    from orcd.quant.kernels.decode_ops import silu_mul

    g = torch.Generator().manual_seed(3)
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        for t, f in ((1, 96), (5, 4864 // 8)):
            gu = (2 * torch.randn(t, 2 * f, generator=g)).to(device=device, dtype=dtype)
            want = F.silu(gu[:, :f]) * gu[:, f:]
            got = silu_mul(gu)
            assert got.shape == want.shape and got.dtype == dtype
            yield f"silu_mul-{str(dtype)[6:]}-{t}x{f}", _err(got, want), tol


def strided_q_check(device: str):
    from orcd.models.layers.attention_triton import paged_decode_attention

    g = torch.Generator().manual_seed(4)
    b, hq, hkv, d, page = 3, 4, 2, 32, 16
    qkv = torch.randn(b, (hq + 2 * hkv) * d, generator=g).to(device)  # one q|k|v product's rows
    q = qkv[:, : hq * d].view(b, hq, d)  # rows (hq + 2 hkv) * d apart
    k_cache = torch.randn(8, page, hkv, d, generator=g).to(device)
    v_cache = torch.randn(8, page, hkv, d, generator=g).to(device)
    tables = torch.arange(8, dtype=torch.int32, device=device).view(2, 4)[[0, 1, 0]].contiguous()
    lens = torch.tensor([40, 7, 64], dtype=torch.int32, device=device)
    a = paged_decode_attention(q, k_cache, v_cache, tables, lens, 0.125)
    ref = paged_decode_attention(q.contiguous(), k_cache, v_cache, tables, lens, 0.125)
    yield "attention-strided-q", float((a - ref).abs().max()), 1e-30 if device == "cpu" else 1e-6


def cases(device: str) -> None:
    for name, err, tol in (*silu_mul_checks(device), *strided_q_check(device)):
        print(f"{name} {err:.3e} {tol:g}")


if __name__ == "__main__":
    cases(sys.argv[1] if len(sys.argv) > 1 else "cpu")
