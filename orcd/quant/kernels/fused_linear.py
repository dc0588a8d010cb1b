"""Fused dequantize-and-multiply over raw GGUF blocks: y[N, out] = x[N, in] @ W.T, W kept quantized.

`raw` is uint8 [out, row_bytes] exactly as the GGUF file stores the tensor (each output row's blocks
contiguous). The weights are read once per call and never written back dequantized.
  - N <= GEMV_MAX_N (decode): `_gemv_kernel`, one program per BO output rows and token, fp32
    multiply-reduce on the CUDA cores (+ bias); `_gemv_glu_kernel` fuses SwiGLU's gate, up and product.
  - larger N (prefill, big batches): Triton dequantize to x.dtype, then one cuBLAS GEMM. (A tl.dot
    kernel over raw tiles measured 2-3x slower than this on an H100 for N = 8..64.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.dequant_kernel import dequantize_raw
from orcd.quant.kernels.gemv_tiles import gemv_tile

# GEMV: type id -> (inputs per group EPG, load units per group U); see gemv_tiles.py
GEMV_GROUPS = {8: (32, 16), 6: (32, 8), 12: (64, 8), 14: (128, 32)}
BLOCK_SIZE = {8: 32, 6: 32, 12: 256, 14: 256}
TYPE_SIZE = {8: 34, 6: 22, 12: 144, 14: 210}
GEMV_MAX_N = 4  # above: dequantize to x.dtype with a Triton kernel, then cuBLAS


@triton.jit
def _rstd(xr, K, eps, NORM: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) over x's row (read once more, from L2) when NORM, else 1."""
    r = 1.0
    if NORM:
        ss = tl.zeros([1024], dtype=tl.float32)
        for k in range(0, K, 1024):
            xv = tl.load(xr + k + tl.arange(0, 1024), mask=k + tl.arange(0, 1024) < K, other=0.0)
            ss += xv.to(tl.float32) * xv.to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / K + eps)
    return r


@triton.jit
def _gemv_kernel(x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn,
                 QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                 b_ptr=None, HAS_BIAS: tl.constexpr = False, nw_ptr=None, eps=0.0,
                 NORM: tl.constexpr = False, RES: tl.constexpr = False):
    gemv_program(tl.program_id(0), tl.program_id(1), x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn,
                 stride_yn, b_ptr, nw_ptr, eps, QT, EPG, U, G, BO, HAS_BIAS, NORM, RES)


@triton.jit
def gemv_program(pid_o, n, x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn, b_ptr, nw_ptr,
                 eps, QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr,
                 BO: tl.constexpr, HAS_BIAS: tl.constexpr, NORM: tl.constexpr, RES: tl.constexpr):
    # one program: BO rows x all of K for token n; products accumulate elementwise, reduced once
    rows = pid_o * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row16 = rows.to(tl.int64)[:, None, None] * (row_bytes // 2)
    gg = tl.arange(0, G)[None, :, None]
    xr = x_ptr + n * stride_xn
    rstd = _rstd(xr, K, eps, NORM)
    acc = tl.zeros([BO, G, U], dtype=tl.float32)
    for k0 in range(0, K, G * EPG):
        km = (k0 + gg * EPG) < K  # whole groups: K is a multiple of the block size
        acc += gemv_tile(p8, p16, p32, row16, rmask & km, km, xr, k0, QT, G, nw_ptr, rstd, NORM)
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    if HAS_BIAS:
        out += tl.load(b_ptr + rows, mask=rows < OUT, other=0.0).to(tl.float32)
    if RES:  # y is the residual stream: y[rows] += x @ W.T (in place)
        out += tl.load(y_ptr + n * stride_yn + rows, mask=rows < OUT, other=0.0).to(tl.float32)
    tl.store(y_ptr + n * stride_yn + rows, out.to(y_ptr.dtype.element_ty), mask=rows < OUT)


@triton.jit
def _gemv_glu_kernel(x_ptr, g8, g16, g32, u8, u16, u32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn,
                     QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                     nw_ptr=None, eps=0.0, NORM: tl.constexpr = False):
    # y = silu(x @ Wg.T) * (x @ Wu.T): the SwiGLU gate and up products and their product in one pass
    pid_o = tl.program_id(0)
    n = tl.program_id(1)
    rows = pid_o * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row16 = rows.to(tl.int64)[:, None, None] * (row_bytes // 2)
    gg = tl.arange(0, G)[None, :, None]
    xr = x_ptr + n * stride_xn
    rstd = _rstd(xr, K, eps, NORM)
    acc_g = tl.zeros([BO, G, U], dtype=tl.float32)
    acc_u = tl.zeros([BO, G, U], dtype=tl.float32)
    for k0 in range(0, K, G * EPG):
        km = (k0 + gg * EPG) < K
        acc_g += gemv_tile(g8, g16, g32, row16, rmask & km, km, xr, k0, QT, G, nw_ptr, rstd, NORM)
        acc_u += gemv_tile(u8, u16, u32, row16, rmask & km, km, xr, k0, QT, G, nw_ptr, rstd, NORM)
    a = tl.sum(tl.sum(acc_g, axis=2), axis=1)
    b = tl.sum(tl.sum(acc_u, axis=2), axis=1)
    out = a / (1.0 + tl.exp(-a)) * b
    tl.store(y_ptr + n * stride_yn + rows, out.to(y_ptr.dtype.element_ty), mask=rows < OUT)


# GEMV launch shapes per type: (max groups per pass, rows per program, warps). Picked from a sweep on
# an H100 (bench/bench_kernels.py; results in docs/performance.md): small tiles of 4 rows beat whole-K
# passes because more programs are in flight; x is loaded once per program and reused by its 4 rows.
GEMV_LAUNCH = {8: (8, 4, 1), 6: (16, 4, 2), 12: (32, 4, 4), 14: (16, 4, 4)}


def gemv_config(qt: int, out_features: int, in_features: int) -> tuple[int, int, int]:
    """(G groups per pass, BO rows per program, num_warps) for the GEMV kernel."""
    g_max, bo, warps = GEMV_LAUNCH[qt]
    g = min(g_max, triton.next_power_of_2(triton.cdiv(in_features, GEMV_GROUPS[qt][0])))
    return g, bo, warps


def _views(raw: torch.Tensor, qt: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    p16 = raw.view(-1).view(torch.int16)
    return raw, p16, raw.view(-1).view(torch.int32) if qt == 12 else p16  # Q4_K rows are 4-byte aligned


def fused_glu(x: torch.Tensor, raw_gate: torch.Tensor, raw_up: torch.Tensor, out_features: int,
              in_features: int, qtype: int, norm: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
    """silu(x' @ Wg.T) * (x' @ Wu.T) for x [N <= GEMV_MAX_N, in]; both weights raw, same type and shape.
    x' = x, or RMSNorm(x) * weight for norm = (weight [in], eps)."""
    qt = int(qtype)
    x = x.contiguous()
    n = x.shape[0]
    y = torch.empty((n, out_features), dtype=x.dtype, device=x.device)
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    g, bo, warps = gemv_config(qt, out_features, in_features)
    epg, u = GEMV_GROUPS[qt]
    _gemv_glu_kernel[(triton.cdiv(out_features, bo), n)](
        x, *_views(raw_gate, qt), *_views(raw_up, qt), y, out_features, in_features, row_bytes, x.stride(0),
        y.stride(0), QT=qt, EPG=epg, U=u, G=g, BO=bo, nw_ptr=norm[0] if norm else None,
        eps=float(norm[1]) if norm else 0.0, NORM=norm is not None, num_warps=warps)
    return y


def fused_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 qtype: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] -> [N, out] in x.dtype (+ bias [out])."""
    return fused_gemv(x, raw, out_features, in_features, qtype, bias)


def fused_gemv(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
               bias: torch.Tensor | None = None, norm: tuple[torch.Tensor, float] | None = None,
               residual: torch.Tensor | None = None) -> torch.Tensor:
    """fused_linear with decode-step fusions (GEMV path, N <= GEMV_MAX_N, x contiguous, only):
    norm = (weight [in], eps): multiply RMSNorm(x) * weight instead of x;
    residual [N, out]: add the product into it in place and return it."""
    qt = int(qtype)
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"x must be [N, {in_features}], got {tuple(x.shape)}")
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    if raw.dtype != torch.uint8 or raw.numel() != out_features * row_bytes:
        raise ValueError(f"raw must be uint8 [{out_features}, {row_bytes}]")
    x = x.contiguous()
    raw = raw.contiguous()
    n = x.shape[0]
    y = residual if residual is not None else torch.empty((n, out_features), dtype=x.dtype, device=x.device)
    if n == 0:
        return y
    if (norm is not None or residual is not None) and n > GEMV_MAX_N:
        raise ValueError("norm/residual fusion is for the GEMV path (N <= GEMV_MAX_N)")
    if n <= GEMV_MAX_N:
        g, bo, warps = gemv_config(qt, out_features, in_features)
        epg, u = GEMV_GROUPS[qt]
        grid = (triton.cdiv(out_features, bo), n)
        _gemv_kernel[grid](x, *_views(raw, qt), y, out_features, in_features, row_bytes, x.stride(0),
                           y.stride(0), QT=qt, EPG=epg, U=u, G=g, BO=bo, b_ptr=bias,
                           HAS_BIAS=bias is not None, nw_ptr=norm[0] if norm else None,
                           eps=float(norm[1]) if norm else 0.0, NORM=norm is not None,
                           RES=residual is not None, num_warps=warps)
        return y
    # more tokens: dequantize to x.dtype (Triton), then one cuBLAS GEMM
    w = dequantize_raw(raw, qt, out_features, in_features, x.dtype)
    return torch.addmm(bias, x, w.t()) if bias is not None else torch.matmul(x, w.t())
