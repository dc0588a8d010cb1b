"""x quantized to int8 per 32 inputs, for the int8-activation GEMVs of gemv_int8.py (llama.cpp's q8_1).

xq int32 [N, K / 4]: word k // 4 holds round(x[k] / dx) as int8 in byte k % 4 (half away from zero);
xs float32 [N, K / 32, 4] per 32 inputs: (dx = max|x| / 127, sum of x over the first 16, over the last
16, 0). The sums are of x itself (not of the rounded values): the K-quants' offset terms (Q4_K's mins,
Q6_K's -32) multiply them exactly. `dp4a` is the 4-way int8 dot product the GEMVs use on these words.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd import env
from orcd.quant.kernels.fused_linear import launch_opts


def asm_ok(device: torch.device) -> bool:
    """Inline PTX (dp4a) on compiled CUDA kernels; under the interpreter the byte-by-byte emulation."""
    return device.type == "cuda" and not env.triton_interpreter()


@triton.jit
def dp4a(a, b, ASM: tl.constexpr):
    """Per element: sum over the 4 bytes of a times the 4 bytes of b (signed int8 each), as int32; a and b
    broadcast against each other (weight words [1, BO, ...] against x words [NT, 1, ...])."""
    a, b = tl.broadcast(a, b)
    if ASM:
        return tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r",
                                         [a, b, tl.zeros_like(a)], dtype=tl.int32, is_pure=True, pack=1)
    acc = tl.zeros_like(a)
    for i in tl.static_range(4):
        acc += ((a << (24 - 8 * i)) >> 24) * ((b << (24 - 8 * i)) >> 24)
    return acc


@triton.jit
def quant32(x):
    """x float32 [B, 8, 4] (32 inputs per row b, word w, byte i) -> (words int32 [B, 8], dx [B],
    sum of x[b, :4] [B], sum of x[b, 4:] [B])."""
    amax = tl.max(tl.max(tl.abs(x), axis=2), axis=1)
    inv = tl.where(amax > 0, 127.0 / amax, 0.0)
    v = x * inv[:, None, None]
    q = tl.where(v >= 0, v + 0.5, v - 0.5).to(tl.int32)
    words = tl.sum((q & 0xFF) << (8 * tl.arange(0, 4)[None, None, :]), axis=2)
    ws = tl.sum(x, axis=2)
    first = tl.arange(0, 8)[None, :] < 4
    return (words, amax / 127.0, tl.sum(tl.where(first, ws, 0.0), axis=1),
            tl.sum(tl.where(first, 0.0, ws), axis=1))


@triton.jit
def store_quant32(x, xq, xs, blk, bm):
    """quant32(x) for blocks blk [B] (mask bm [B]) stored at xq (words) and xs (4 floats per block)."""
    words, dx, s0, s1 = quant32(x)
    tl.store(xq + blk[:, None] * 8 + tl.arange(0, 8)[None, :], words, mask=bm[:, None])
    tl.store(xs + blk * 4, dx, mask=bm)
    tl.store(xs + blk * 4 + 1, s0, mask=bm)
    tl.store(xs + blk * 4 + 2, s1, mask=bm)
    tl.store(xs + blk * 4 + 3, 0.0 * dx, mask=bm)


@triton.jit
def _q8_kernel(x_ptr, nw_ptr, xq_ptr, xs_ptr, K, eps, stride_xn, BB: tl.constexpr, NORM: tl.constexpr,
               PDL: tl.constexpr = 0):
    # program (n, j): x row n's inputs [j * BB * 32, ...) (NORM: all of the row, in chunks of BB * 32)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    n = tl.program_id(0)
    xr = x_ptr + n * stride_xn
    b = tl.arange(0, BB)
    off = b[:, None, None] * 32 + tl.arange(0, 8)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]
    rstd = 1.0
    lo = tl.program_id(1) * BB * 32
    hi = tl.minimum(K, lo + BB * 32)
    if NORM:
        lo = 0
        hi = K
        ss = tl.zeros([BB, 8, 4], dtype=tl.float32)
        for k0 in range(0, K, BB * 32):
            xv = tl.load(xr + k0 + off, mask=k0 + off < K, other=0.0).to(tl.float32)
            ss += xv * xv
        rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(tl.sum(ss, axis=2), axis=1), axis=0) / K + eps)
    for k0 in range(lo, hi, BB * 32):
        mk = k0 + off < K
        xv = tl.load(xr + k0 + off, mask=mk, other=0.0)
        if NORM:  # as the eager layer rounds: round(round(x * rstd) * w) in x's dtype
            xn = (xv.to(tl.float32) * rstd).to(xv.dtype).to(tl.float32)
            xv = (xn * tl.load(nw_ptr + k0 + off, mask=mk, other=0.0).to(tl.float32)).to(xv.dtype)
        store_quant32(xv.to(tl.float32), xq_ptr + n * (K // 4), xs_ptr + n * (K // 8), k0 // 32 + b,
                      k0 + b * 32 < K)


@triton.jit
def _q8_row_kernel(x_ptr, nw_ptr, xq_ptr, xs_ptr, K, eps, stride_xn, BB: tl.constexpr, PDL: tl.constexpr = 0):
    # program n: RMSNorm(x row n) * w quantized, the whole row (K <= BB * 32) loaded once. In a decode step
    # this launch sits between two GEMVs on the step's critical path: _q8_kernel's NORM path walks the
    # row twice in 1024-input chunks (8 dependent loads on one program of 4 warps)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    n = tl.program_id(0)
    b = tl.arange(0, BB)
    off = b[:, None, None] * 32 + tl.arange(0, 8)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]
    mk = off < K
    xv = tl.load(x_ptr + n * stride_xn + off, mask=mk, other=0.0)
    xf = xv.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(tl.sum(xf * xf, axis=2), axis=1), axis=0) / K + eps)
    xn = (xf * rstd).to(xv.dtype).to(tl.float32)  # as the eager layer rounds: round(round(x * rstd) * w)
    xv = (xn * tl.load(nw_ptr + off, mask=mk, other=0.0).to(tl.float32)).to(xv.dtype)
    store_quant32(xv.to(tl.float32), xq_ptr + n * (K // 4), xs_ptr + n * (K // 8), b, b * 32 < K)


ONE_PASS_K = 8192  # quantize_x with a norm: rows up to this width take _q8_row_kernel


def quantize_x(x: torch.Tensor, norm: tuple[torch.Tensor, float] | None = None):
    """x [N, K] (K % 32 == 0) -> (xq int32 [N, K / 4], xs float32 [N, K / 32, 4]).
    norm = (weight [K], eps): quantize RMSNorm(x) * weight instead."""
    n, k = x.shape
    if k % 32:
        raise ValueError(f"K = {k} is not a multiple of 32")
    xq = torch.empty((n, k // 4), dtype=torch.int32, device=x.device)
    xs = torch.empty((n, k // 32, 4), dtype=torch.float32, device=x.device)
    if norm is not None and k <= ONE_PASS_K:  # the row in registers: one load, 8 warps
        _q8_row_kernel[(n,)](x, norm[0], xq, xs, k, float(norm[1]), x.stride(0),
                             BB=triton.next_power_of_2(k // 32), num_warps=8, **launch_opts(x.device))
        return xq, xs
    bb = 32  # 1024 inputs per chunk
    grid = (n, 1 if norm else triton.cdiv(k, bb * 32))
    _q8_kernel[grid](x, norm[0] if norm else None, xq, xs, k, float(norm[1]) if norm else 0.0, x.stride(0),
                     BB=bb, NORM=norm is not None, num_warps=4, **launch_opts(x.device))
    return xq, xs
