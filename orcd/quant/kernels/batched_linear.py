"""Batched decode product over raw GGUF blocks: y[M, N] = x[M, K] @ W[N, K].T for M = 2..64 rows.

Each weight tile is read from memory once for all M rows: a program owns BN output columns and every row
(BM = the next power of two >= M, at least 16, at most 64), dequantizes W's [BN, BK] tile in registers
(tiles.py) to x's dtype and multiplies on the tensor cores (tl.dot, fp32 accumulation). Where the N tiles
are too few to fill the GPU (attention's 3584 x 3584 or 512 x 3584 at 7B), K is split into S ranges of
whole K steps; each writes an fp32 partial [S, M, N] that one reduce kernel adds in split order (+ bias),
so the result does not depend on timing. This replaces dequantize-to-bf16 + cuBLAS (which writes and
re-reads the whole weight in bf16: ~3.6x the bytes of Q4_K) for the fast, non-invariant path only; the
batch-invariant path keeps invariant_linear.py (one tile shape for every M).
"""

from __future__ import annotations

import types

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.invariant_linear import _inv_reduce_kernel
from orcd.quant.kernels.tiles import dequant_tile

# type -> (elements per scale group S, groups per K step G): BK = S * G inputs per step
MM_TILES = types.MappingProxyType({Q.Q8_0: (32, 4), Q.Q5_0: (32, 4), Q.Q4_K: (32, 8), Q.Q6_K: (16, 16)})
# type -> (BN output columns per program, num_warps, num_stages); see docs/performance.md
MM_LAUNCH = types.MappingProxyType({Q.Q8_0: (64, 4, 2), Q.Q5_0: (64, 4, 2), Q.Q4_K: (64, 4, 2),
                                    Q.Q6_K: (64, 4, 2)})
BM_MAX = 64  # rows per program; more rows: more programs along M (each reads the weights again)
TARGET_PROGRAMS = 264  # 2 per SM on an H100: split K until about this many programs run


@triton.jit
def _mm_kernel(x_ptr, w_ptr, w16_ptr, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm, stride_ym, w_row,
               steps_per_split, QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr):
    # program (n tile, m tile, split s): rows [BM], columns [BN], K steps [s * sps, (s + 1) * sps);
    # w_row: bytes per weight row; SPLIT: write fp32 partials ws [splits, M, N] instead of y
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    BK: tl.constexpr = S * G
    row_off = rn.to(tl.int64)[:, None, None] * w_row  # [BN, 1, 1] byte offset of each weight row
    gg = tl.arange(0, G)[None, :, None]
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    k_lo = split * steps_per_split * BK
    k_hi = tl.minimum(k_lo + steps_per_split * BK, K)
    for k0 in range(k_lo, k_hi, BK):
        m3 = nmask[:, None, None] & ((k0 + gg * S) < K)  # whole groups: K is a multiple of the block
        w = tl.reshape(dequant_tile(w_ptr, w16_ptr, row_off, m3, k0, QT, G), [BN, BK])
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=mmask[:, None] & (kk[None, :] < K), other=0.0)  # [BM, BK]
        if IEEE:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    omask = mmask[:, None] & nmask[None, :]
    if SPLIT:
        tl.store(ws_ptr + (split * M + rm.to(tl.int64))[:, None] * N + rn[None, :], acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


def mm_plan(qtype: Q, m: int, n: int, k: int, launch: tuple[int, int, int] | None = None,
            target: int = TARGET_PROGRAMS) -> tuple[int, int, int, int, int]:
    """(BM, BN, num_warps, num_stages, K steps per split) for an [m, k] x [n, k].T product."""
    bn, warps, stages = launch or MM_LAUNCH[qtype]
    s, g = MM_TILES[qtype]
    bm = min(BM_MAX, max(16, triton.next_power_of_2(m)))
    steps = triton.cdiv(k, s * g)
    tiles = triton.cdiv(n, bn) * triton.cdiv(m, bm)
    splits = min(steps, max(1, triton.cdiv(target, tiles)))
    return bm, bn, warps, stages, triton.cdiv(steps, splits)


def batched_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
                   bias: torch.Tensor | None = None, launch: tuple[int, int, int] | None = None,
                   target: int = TARGET_PROGRAMS) -> torch.Tensor:
    """x [M, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] of `qtype` -> [M, out] in x.dtype (+ bias).
    launch: (BN, warps, stages) instead of MM_LAUNCH's; target: programs to aim for with split-K."""
    qt = Q(int(qtype))
    x = x.contiguous()
    m, k = x.shape
    s, g = MM_TILES[qt]
    block, size = {Q.Q8_0: (32, 34), Q.Q5_0: (32, 22), Q.Q4_K: (256, 144), Q.Q6_K: (256, 210)}[qt]
    w_row = in_features // block * size
    if k != in_features or raw.dtype != torch.uint8 or raw.numel() != out_features * w_row:
        raise ValueError(f"x must be [M, {in_features}] and raw uint8 [{out_features}, {w_row}]")
    raw = raw.contiguous()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    bm, bn, warps, stages, sps = mm_plan(qt, m, out_features, k, launch, target)
    splits = triton.cdiv(triton.cdiv(k, s * g), sps)
    ws = torch.empty((splits, m, out_features), dtype=torch.float32, device=x.device) if splits > 1 else None
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    _mm_kernel[grid](x, raw, raw.view(-1).view(torch.int16), bias, y, ws, m, out_features, k, x.stride(0),
                     y.stride(0), w_row, sps, QT=int(qt), S=s, G=g, BM=bm, BN=bn, SPLIT=splits > 1,
                     HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, num_warps=warps,
                     num_stages=stages)
    if splits > 1:
        blk = 1024
        _inv_reduce_kernel[(triton.cdiv(m * out_features, blk),)](
            ws, bias, y, m, out_features, y.stride(0), SPLITS=splits, BLOCK=blk, HAS_BIAS=bias is not None,
            num_warps=4)
    return y
