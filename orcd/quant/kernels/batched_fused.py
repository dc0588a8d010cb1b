"""The norm-fused decode step's products at 5..64 rows, in one pass over raw GGUF blocks.

fused_gemv's RMSNorm / residual fusions and fused_glu's SwiGLU above GEMV_MAX_N rows: batched_linear's
tiles (a program owns BN weight rows and all BM <= 64 rows of x, each weight tile dequantized in
registers once and multiplied on the tensor cores), plus
  NORM  x' = bf16(bf16(x * rstd) * nw) as the GEMVs' _ldx (rstd = 1 / sqrt(mean(x^2) + eps) of each row,
        from a first pass over that row of x)
  RES   y [M, N] += x' @ W.T (+ bias) in place (the residual stream)
  GLU   y = silu(x' @ Wg.T) * (x' @ Wu.T), both weights read in the same loop step (GELU: gelu_tanh in
        place of silu, Gemma's FFN; the same formulas as fused_linear's _gemv_glu_kernel)
Where the N tiles are too few to fill the GPU (0.5B o / down: 896 rows), K is split as in batched_linear
(split_k.py) and one reduce kernel adds the fp32 partials in split order, then the bias and the residual;
the SwiGLU's K is never split (its nonlinearity needs both whole sums).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.batched_linear import MM_TILES, mm_dot, mm_views, w_tile
from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.split_k import TARGET_PROGRAMS, partials, reduce_partials, row_tile, steps_per_split

FUSED_LAUNCH = (32, 4, 2)  # (BN, num_warps, num_stages): batched_linear's best at the 0.5B q/k/v (mmq_05b.md)


@triton.jit
def _rows_rstd(x_ptr, rm, mmask, K, stride_xm, eps, BM: tl.constexpr, BK: tl.constexpr):
    """RMSNorm's 1 / sqrt(mean(x^2) + eps) of each of the BM rows rm, float32 [BM]."""
    ss = tl.zeros([BM], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=mmask[:, None] & (kk[None, :] < K), other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=1)
    return 1.0 / tl.sqrt(ss / K + eps)


@triton.jit
def _x_tile(x_ptr, nw_ptr, rm, mmask, k0, K, stride_xm, rstd, BK: tl.constexpr, NORM: tl.constexpr):
    """x's [BM, BK] tile at inputs k0.. in x's dtype; NORM: RMSNorm'd with weight nw (zeros past K)."""
    kk = k0 + tl.arange(0, BK)
    kmask = kk < K
    x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                mask=mmask[:, None] & kmask[None, :], other=0.0)
    if NORM:
        xn = (x.to(tl.float32) * rstd[:, None]).to(x.dtype).to(tl.float32)
        x = (xn * tl.load(nw_ptr + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]).to(x.dtype)
    return x


@triton.jit
def _fused_mm_kernel(x_ptr, w8, w16, w32, u8, u16, u32, nw_ptr, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm,
                     stride_ym, w_row, eps, steps_per_split, QT: tl.constexpr, S: tl.constexpr,
                     G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NORM: tl.constexpr,
                     RES: tl.constexpr, GLU: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                     SPLIT: tl.constexpr, GELU: tl.constexpr = False, Q6S: tl.constexpr = False):
    # program (n tile, m tile, split s): y.T [BN, BM] = W [BN, K_s] @ x'.T [K_s, BM] over split s's K
    # steps (u*: GLU's up); SPLIT: the fp32 partial to ws [splits, M, N], the reduce kernel does the rest
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    BK: tl.constexpr = S * G
    row_off = rn.to(tl.int64)[:, None, None] * w_row  # [BN, 1, 1] byte offset of each weight row
    nm3 = nmask[:, None, None]
    rstd = tl.full([BM], 1.0, tl.float32)
    if NORM:
        rstd = _rows_rstd(x_ptr, rm, mmask, K, stride_xm, eps, BM, BK)
    acc = tl.zeros([BN, BM], dtype=tl.float32)
    acc_u = tl.zeros([BN, BM], dtype=tl.float32)
    k_lo = tl.program_id(2) * steps_per_split * BK
    for k0 in range(k_lo, tl.minimum(k_lo + steps_per_split * BK, K), BK):
        xt = tl.trans(_x_tile(x_ptr, nw_ptr, rm, mmask, k0, K, stride_xm, rstd, BK, NORM))  # [BK, BM]
        w = w_tile(w8, w16, w32, row_off, nm3, k0, K, QT, S, G, Q6S)
        acc = mm_dot(w.to(xt.dtype), xt, acc, IEEE)
        if GLU:
            wu = w_tile(u8, u16, u32, row_off, nm3, k0, K, QT, S, G, Q6S)
            acc_u = mm_dot(wu.to(xt.dtype), xt, acc_u, IEEE)
    if GLU and GELU:  # 0.5 a (1 + tanh(z)) = a * sigmoid(2z), z = sqrt(2/pi) (a + 0.044715 a^3)
        acc = acc / (1.0 + tl.exp(-1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))) * acc_u
    elif GLU:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_u
    if SPLIT:
        tl.store(ws_ptr + (tl.program_id(2) * M + rm.to(tl.int64))[None, :] * N + rn[:, None], acc,
                 mask=nmask[:, None] & mmask[None, :])
    else:
        _epilogue(tl.trans(acc), b_ptr, y_ptr, rm, rn, mmask, nmask, stride_ym, HAS_BIAS, RES)


@triton.jit
def _epilogue(out, b_ptr, y_ptr, rm, rn, mmask, nmask, stride_ym, HAS_BIAS: tl.constexpr, RES: tl.constexpr):
    """y [BM, BN] tile = out (fp32) + bias (+ y itself: the residual), in y's dtype."""
    if HAS_BIAS:
        out += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
    omask = mmask[:, None] & nmask[None, :]
    ptrs = y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :]
    if RES:
        out += tl.load(ptrs, mask=omask, other=0.0).to(tl.float32)
    tl.store(ptrs, out.to(y_ptr.dtype.element_ty), mask=omask)


def batched_fused(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
                  norm: tuple[torch.Tensor, float] | None = None, residual: torch.Tensor | None = None,
                  raw_up: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  launch: tuple[int, int, int] | None = None, gelu: bool = False,
                  target: int = TARGET_PROGRAMS, split: bool = False) -> torch.Tensor:
    """x [M <= 64, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] -> [M, out] in x.dtype:
    x' @ W.T (+ bias [out]) with x' = x or RMSNorm(x) * weight for norm = (weight [in], eps); residual
    [M, out]: the product added into it in place and returned; raw_up (same type and shape): silu(x' @ W.T)
    * (x' @ U.T) (no residual, no bias; gelu: gelu_tanh for silu). launch: (BN, warps, stages) instead
    of FUSED_LAUNCH; target: programs to aim for with split-K (not for the SwiGLU; 1: no split).
    split: raw (and raw_up) Q6_K in layout.split_q6_k's layout (the same values as on GGUF's blocks)."""
    qt = Q(int(qtype))
    x = x.contiguous()
    m, k = x.shape
    w_row = row_bytes(qt, in_features)
    if k != in_features or raw.dtype != torch.uint8 or raw.numel() != out_features * w_row:
        raise ValueError(f"x must be [M, {in_features}] and raw uint8 [{out_features}, {w_row}]")
    if raw_up is not None and (residual is not None or bias is not None or raw_up.shape != raw.shape):
        raise ValueError("raw_up: the SwiGLU's up matrix, shaped as raw, and no residual or bias")
    if residual is not None and (tuple(residual.shape) != (m, out_features) or residual.stride(1) != 1):
        raise ValueError(f"residual must be [{m}, {out_features}] with contiguous rows")
    y = residual if residual is not None else torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    s, g = MM_TILES[qt]
    bn, warps, stages = launch or FUSED_LAUNCH
    bm = row_tile(m)
    steps = triton.cdiv(k, s * g)
    sps = steps if raw_up is not None else steps_per_split(steps, m, out_features, bm, bn, target)
    splits = triton.cdiv(steps, sps)
    ws = partials(splits, y)
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    flags = {"HAS_BIAS": bias is not None, "RES": residual is not None, "Q6S": split}
    w = mm_views(raw.contiguous(), qt, split)
    up = mm_views(raw_up.contiguous(), qt, split) if raw_up is not None else w
    _fused_mm_kernel[grid](x, *w, *up, norm[0] if norm else None, bias, y, ws, m,
                           out_features, k, x.stride(0), y.stride(0), w_row, float(norm[1]) if norm else 0.0,
                           sps, QT=int(qt), S=s, G=g, BM=bm, BN=bn, NORM=norm is not None,
                           GLU=raw_up is not None, IEEE=x.dtype == torch.float32, SPLIT=splits > 1, GELU=gelu,
                           num_warps=warps, num_stages=stages, **flags)
    reduce_partials(ws, bias, y, residual=residual is not None)
    return y
