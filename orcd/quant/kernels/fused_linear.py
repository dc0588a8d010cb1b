"""Fused dequantize-and-multiply over raw GGUF blocks: y[N, out] = x[N, in] @ W.T, W kept quantized.

`raw` is uint8 [out, row_bytes] exactly as the GGUF file stores the tensor (each output row's blocks
contiguous). The weights are read once per call and never written back dequantized.
Two kernels:
  - `_gemv_kernel` for N <= GEMV_MAX_N (decode): one program per BO output rows (and per token),
    fp32 multiply-reduce on the CUDA cores; the weight tile stays in L1/L2 across the N tokens.
  - `_dot_kernel` for larger N: the tile is dequantized to x.dtype and fed to tl.dot (tensor cores).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.gemv_tiles import gemv_tile
from orcd.quant.kernels.tiles import dequant_tile

# GGML type id -> (elements per scale group S, groups per K-iteration G) for the dot kernel's tiles
TILE_SHAPES = {
    8: (32, 4),  # Q8_0
    6: (32, 4),  # Q5_0
    12: (32, 8),  # Q4_K: 8 sub-blocks of 32 = one 256-block per iteration
    14: (16, 16),  # Q6_K: 16 scale groups of 16 = one 256-block per iteration
}
# GEMV: type id -> (inputs per group EPG, load units per group U); see gemv_tiles.py
GEMV_GROUPS = {8: (32, 16), 6: (32, 8), 12: (64, 8), 14: (128, 32)}
BLOCK_SIZE = {8: 32, 6: 32, 12: 256, 14: 256}
TYPE_SIZE = {8: 34, 6: 22, 12: 144, 14: 210}
GEMV_MAX_N = 4
DOT_MAX_N = 16  # above: dequantize to x.dtype with a Triton kernel, then cuBLAS


@triton.jit
def _gemv_kernel(x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn,
                 QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr, BO: tl.constexpr):
    # one program: BO rows x all of K for token n; products accumulate elementwise, reduced once
    pid_o = tl.program_id(0)
    n = tl.program_id(1)
    rows = pid_o * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row16 = rows.to(tl.int64)[:, None, None] * (row_bytes // 2)
    gg = tl.arange(0, G)[None, :, None]
    xr = x_ptr + n * stride_xn
    acc = tl.zeros([BO, G, U], dtype=tl.float32)
    for k0 in range(0, K, G * EPG):
        km = (k0 + gg * EPG) < K  # whole groups: K is a multiple of the block size
        acc += gemv_tile(p8, p16, p32, row16, rmask & km, km, xr, k0, QT, G)
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(y_ptr + n * stride_yn + rows, out.to(y_ptr.dtype.element_ty), mask=rows < OUT)


@triton.jit
def _dot_kernel(x_ptr, p8, p16, y_ptr, N, OUT, K, row_bytes, stride_xn, stride_yn,
                QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                BN: tl.constexpr, IEEE: tl.constexpr):
    pid_o = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_o * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row_off = rows.to(tl.int64)[:, None, None] * row_bytes
    ns = pid_n * BN + tl.arange(0, BN)
    gg = tl.arange(0, G)[None, :, None]
    kk = tl.arange(0, G * S)
    acc = tl.zeros([BN, BO], dtype=tl.float32)
    for k0 in range(0, K, G * S):
        kmask = (k0 + gg * S) < K
        w = dequant_tile(p8, p16, row_off, rmask & kmask, k0, QT, G)
        w2 = tl.reshape(w, [BO, G * S]).to(x_ptr.dtype.element_ty)
        xm = (ns[:, None] < N) & ((k0 + kk)[None, :] < K)
        xv = tl.load(x_ptr + ns[:, None] * stride_xn + k0 + kk[None, :], mask=xm, other=0.0)
        if IEEE:
            acc += tl.dot(xv, tl.trans(w2), input_precision="ieee")
        else:
            acc += tl.dot(xv, tl.trans(w2))
    ym = (ns[:, None] < N) & (rows[None, :] < OUT)
    tl.store(y_ptr + ns[:, None] * stride_yn + rows[None, :], acc.to(y_ptr.dtype.element_ty), mask=ym)


# GEMV launch shapes per type: (max groups per pass, rows per program, warps). Picked from a sweep on
# an H100 (bench/bench_kernels.py; results in docs/performance.md): small tiles of 4 rows beat whole-K
# passes because more programs are in flight; x is loaded once per program and reused by its 4 rows.
GEMV_LAUNCH = {8: (8, 4, 1), 6: (8, 4, 1), 12: (32, 4, 4), 14: (16, 4, 4)}


def gemv_config(qt: int, out_features: int, in_features: int) -> tuple[int, int, int]:
    """(G groups per pass, BO rows per program, num_warps) for the GEMV kernel."""
    g_max, bo, warps = GEMV_LAUNCH[qt]
    g = min(g_max, triton.next_power_of_2(triton.cdiv(in_features, GEMV_GROUPS[qt][0])))
    return g, bo, warps


def fused_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 qtype: int) -> torch.Tensor:
    """x [N, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] -> [N, out] in x.dtype."""
    qt = int(qtype)
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"x must be [N, {in_features}], got {tuple(x.shape)}")
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    if raw.dtype != torch.uint8 or raw.numel() != out_features * row_bytes:
        raise ValueError(f"raw must be uint8 [{out_features}, {row_bytes}]")
    x = x.contiguous()
    raw = raw.contiguous()
    n = x.shape[0]
    y = torch.empty((n, out_features), dtype=x.dtype, device=x.device)
    if n == 0:
        return y
    p16 = raw.view(-1).view(torch.int16)
    if n <= GEMV_MAX_N:
        p32 = raw.view(-1).view(torch.int32) if qt == 12 else p16  # Q4_K rows are 4-byte aligned
        g, bo, warps = gemv_config(qt, out_features, in_features)
        epg, u = GEMV_GROUPS[qt]
        grid = (triton.cdiv(out_features, bo), n)
        _gemv_kernel[grid](x, raw, p16, p32, y, out_features, in_features, row_bytes, x.stride(0),
                           y.stride(0), QT=qt, EPG=epg, U=u, G=g, BO=bo, num_warps=warps)
    elif n > DOT_MAX_N:
        from orcd.quant.kernels.dequant_kernel import dequantize_raw

        w = dequantize_raw(raw, qt, out_features, in_features, x.dtype)
        torch.matmul(x, w.t(), out=y)
    else:
        s, g_dot = TILE_SHAPES[qt]
        bn = 16 if n <= 16 else (32 if n <= 32 else 64)
        bo = 32
        grid = (triton.cdiv(out_features, bo), triton.cdiv(n, bn))
        _dot_kernel[grid](x, raw, p16, y, n, out_features, in_features, row_bytes, x.stride(0), y.stride(0),
                          QT=qt, S=s, G=g_dot, BO=bo, BN=bn, IEEE=x.dtype == torch.float32, num_warps=4)
    return y
