"""x quantized to int8 per 32 inputs for the int8 tensor-core products (mmq.py), in a dot-ready layout.

xq int8 [M, K]: round(x / dx) (half away from zero), in input order; xd float32 [M, K / 32]: dx =
max|x| / 127 of each 32 inputs (0 for all-zero blocks); xs float32 [M, K / 32]: the sum of x itself
over the 32 inputs (not of the rounded values: Q4_K's mins multiply it exactly). Same rounding as
xquant.py's quant32 (the GEMVs' packed layout); kept apart so fused_linear can route here without an
import cycle (xquant imports fused_linear).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _xq32_kernel(x_ptr, xq_ptr, xd_ptr, xs_ptr, K, stride_xm, BB: tl.constexpr):
    # program (m, j): row m's 32-input blocks [j * BB, (j + 1) * BB)
    m = tl.program_id(0)
    b = tl.program_id(1) * BB + tl.arange(0, BB)
    bmask = b * 32 < K
    off = b[:, None] * 32 + tl.arange(0, 32)[None, :]  # [BB, 32]
    x = tl.load(x_ptr + m * stride_xm + off, mask=bmask[:, None], other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    inv = tl.where(amax > 0, 127.0 / amax, 0.0)
    v = x * inv[:, None]
    q = tl.where(v >= 0, v + 0.5, v - 0.5).to(tl.int32)  # |q| <= 127: truncation after +-0.5
    row = m.to(tl.int64) * K
    tl.store(xq_ptr + row + off, q.to(tl.int8), mask=bmask[:, None])
    tl.store(xd_ptr + row // 32 + b, amax / 127.0, mask=bmask)
    tl.store(xs_ptr + row // 32 + b, tl.sum(x, axis=1), mask=bmask)


def quantize_x32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] (K % 32 == 0; any float dtype) -> (xq int8 [M, K], xd float32 [M, K / 32],
    xs float32 [M, K / 32])."""
    m, k = x.shape
    if k % 32:
        raise ValueError(f"K = {k} is not a multiple of 32")
    x = x.contiguous()
    xq = torch.empty((m, k), dtype=torch.int8, device=x.device)
    xd = torch.empty((m, k // 32), dtype=torch.float32, device=x.device)
    xs = torch.empty_like(xd)
    bb = 32  # 1024 inputs per program
    if m:
        _xq32_kernel[(m, triton.cdiv(k // 32, bb))](x, xq, xd, xs, k, x.stride(0), BB=bb, num_warps=4)
    return xq, xd, xs
