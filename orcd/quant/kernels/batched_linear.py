"""Batched decode product over raw GGUF blocks: y[M, N] = x[M, K] @ W[N, K].T for M = 2..64 rows.

Each weight tile is read from memory once for all M rows: a program owns BN output columns and every row
(BM = the next power of two >= M, at least 16, at most 64), dequantizes W's [BN, BK] tile in registers
(tiles.py) to x's dtype and multiplies on the tensor cores (tl.dot, fp32 accumulation). Where the N tiles
are too few to fill the GPU (attention's 3584 x 3584 or 512 x 3584 at 7B), K is split into S ranges of
whole K steps; each writes an fp32 partial [S, M, N] that one reduce kernel adds in split order (+ bias),
so the result does not depend on timing (split_k.py). This replaces dequantize-to-bf16 + cuBLAS (which
writes and re-reads the whole weight in bf16: ~3.6x the bytes of Q4_K) for the fast, non-invariant path
only; the batch-invariant path keeps invariant_linear.py (one tile shape for every M).
"""

from __future__ import annotations

import types

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import q6k_views, row_bytes
from orcd.quant.kernels.split_k import TARGET_PROGRAMS, partials, reduce_partials, row_tile, steps_per_split
from orcd.quant.kernels.tiles import dequant_tile

# type -> (elements per scale group S, groups per K step G): BK = S * G inputs per step
# (K-quants: one 256-input super-block per step, read by _tile_q4_k / _tile_q6_k)
MM_TILES = types.MappingProxyType({Q.Q8_0: (32, 4), Q.Q5_0: (32, 4), Q.Q4_K: (32, 8), Q.Q6_K: (16, 16)})
# (BN output columns per program, num_warps, num_stages), from the H100 sweep over the 7B products at
# M = 8 and 64 (docs/performance.md, "7B and the peer"): BN 64, 4 warps, 2 stages, W as the first dot
# operand; for long rows (K >= LONG_K: 7B ffn_down, K = 18944) BN 128, 8 warps, 3 stages.
MM_LAUNCH = (64, 4, 2)
MM_LAUNCH_LONG_K = (128, 8, 3)
LONG_K = 8192
# fused_linear sends GEMV_MAX_N < N <= MM_MAX_N rows here (those mmq.py does not take) for these types and
# matrices of >= MM_MIN_WEIGHTS weights: where the H100 sweeps measured it faster than dequantize + cuBLAS
# (Q8_0: 0.5B LM head 272 -> 92 us at M = 8; Q4_K / Q6_K 7B gate, down, LM head 1.5-2x). Not sent: Q5_0
# and the small K-quant matrices, where both paths sit at the ~5 us of two small launches and cuBLAS was
# as fast or faster (0.5B q/o, k, gate/up, Q6_K down at M = 8..64: bench/results/mmq_05b.md). Nor the
# 72B's large Q5_0 ffn_down: 0.44-0.53 TB/s either way at 8-16 rows, and here 1.4x slower at 32-64 (one
# H200, session 25, bench/results/tp4_s25/m1_batched_*.json).
MM_ROUTE = types.MappingProxyType({Q.Q8_0: 0, Q.Q4_K: 1 << 24, Q.Q6_K: 1 << 24})  # type -> MM_MIN_WEIGHTS


@triton.jit
def _tile_q4_k(p8, p16, p32, row_off, nmask, k0):
    """[BN, 256] float32 of one Q4_K super-block per row (k0 % 256 == 0), in input order, from int32
    loads of qs: dims (u, w, i) = (sub-block 2c + h, word of chunk c, byte in word): element u*32 + 4w + i
    is nibble h of byte i of word w of chunk c = u // 2 (the ggml layout)."""
    u = tl.arange(0, 8)[None, :, None, None]
    w = tl.arange(0, 8)[None, None, :, None]
    i = tl.arange(0, 4)[None, None, None, :]
    blk = row_off[:, :, :, None] + (k0 // 256) * 144  # [BN, 1, 1, 1] byte offset of the block
    m = nmask[:, :, :, None]
    d = tl.load(p16 + blk // 2, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    dmin = tl.load(p16 + blk // 2 + 1, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    sc8 = blk + 4  # 12 bytes of 6-bit scales and mins: j < 4 low 6 bits; else split (ggml get_scale_min_k4)
    lowj = u < 4
    a = tl.load(p8 + sc8 + tl.where(lowj, u, u + 4), mask=m, other=0).to(tl.int32)
    b = tl.load(p8 + sc8 + tl.where(lowj, u + 4, u - 4), mask=m, other=0).to(tl.int32)
    c = tl.load(p8 + sc8 + u, mask=m, other=0).to(tl.int32)
    sc = tl.where(lowj, a & 63, (a & 0xF) | ((b >> 6) << 4)).to(tl.float32)
    mn = tl.where(lowj, b & 63, (a >> 4) | ((c >> 6) << 4)).to(tl.float32)
    q = tl.load(p32 + blk // 4 + 4 + (u // 2) * 8 + w, mask=m, other=0)  # [BN, 8, 8, 1] int32
    nib = ((q >> (4 * (u % 2) + 8 * i)) & 0xF).to(tl.float32)
    return tl.reshape((d * sc) * nib - dmin * mn, [q.shape[0], 256])


@triton.jit
def _tile_q6_k(p8, p16, row_off, nmask, k0):
    """[BN, 256] float32 of one Q6_K super-block per row (k0 % 256 == 0), in input order, from int16 loads
    (blocks are 210 bytes: 2-byte aligned): dims (u, wh, wl, i), u = 4n + t (half n, quarter t), l = 2w + i
    (w = 8wh + wl): element 128n + 32t + l = lo4 of ql[64n + 32(t%2) + l] (>> 4 for t >= 2) | 2 bits of
    qh[32n + l] (>> 2t) << 4, minus 32, times d * scales[8n + 2t + l // 16]."""
    u = tl.arange(0, 8)[None, :, None, None, None]
    wh = tl.arange(0, 2)[None, None, :, None, None]
    wl = tl.arange(0, 8)[None, None, None, :, None]
    i = tl.arange(0, 2)[None, None, None, None, :]
    blk = row_off[:, :, :, None, None] + (k0 // 256) * 210
    m = nmask[:, :, :, None, None]
    n = u // 4
    t = u % 4
    d = tl.load(p16 + blk // 2 + 104, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    sc = tl.load(p8 + blk + 192 + 8 * n + 2 * t + wh, mask=m, other=0).to(tl.int8, bitcast=True)
    w = 8 * wh + wl
    ql = tl.load(p16 + blk // 2 + 32 * n + 16 * (t % 2) + w, mask=m, other=0).to(tl.int32)
    qh = tl.load(p16 + blk // 2 + 64 + 16 * n + w, mask=m, other=0).to(tl.int32)
    q = ((ql >> (4 * (t // 2) + 8 * i)) & 0xF) | (((qh >> (2 * t + 8 * i)) & 3) << 4)
    return tl.reshape((d * sc.to(tl.float32)) * (q - 32).to(tl.float32), [ql.shape[0], 256])


@triton.jit
def _tile_q6_k_split(p8, pd, p32, row_off, nmask, k0):
    """_tile_q6_k's [BN, 256] from layout.split_q6_k's layout: block (r, b) = row_off // 210 + b, its
    208 bytes at byte 208 * block (16-byte aligned: int32 loads of p32), its d at pd[block]. Dims (n, th,
    tm, w, i): element 128n + 32t + l with t = 2th + tm (quarter) and l = 4w + i (byte i of word w of a
    32-byte run); each ql / qh word is loaded once (ql's for both nibbles th, qh's for all four t). The
    same elements and the same arithmetic as _tile_q6_k, so the same values bit for bit."""
    n = tl.arange(0, 2)[None, :, None, None, None, None]
    th = tl.arange(0, 2)[None, None, :, None, None, None]
    tm = tl.arange(0, 2)[None, None, None, :, None, None]
    w = tl.arange(0, 8)[None, None, None, None, :, None]
    i = tl.arange(0, 4)[None, None, None, None, None, :]
    blk = row_off[:, :, :, None, None, None] // 210 + k0 // 256  # [BN, 1, ...] (row_off = r * nb * 210)
    m = nmask[:, :, :, None, None, None]
    d = tl.load(pd + blk, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    blkw = blk * 52  # the block's first int32 word
    t = 2 * th + tm
    sc = tl.load(p8 + blkw * 4 + 192 + 8 * n + 2 * t + w // 4, mask=m, other=0).to(tl.int8, bitcast=True)
    ql = tl.load(p32 + blkw + 16 * n + 8 * tm + w, mask=m, other=0)  # [BN, 2, 1, 2, 8, 1]
    qh = tl.load(p32 + blkw + 32 + 8 * n + w, mask=m, other=0)  # [BN, 2, 1, 1, 8, 1]
    q = ((ql >> (4 * th + 8 * i)) & 0xF) | (((qh >> (2 * t + 8 * i)) & 3) << 4)
    return tl.reshape((d * sc.to(tl.float32)) * (q - 32).to(tl.float32), [ql.shape[0], 256])


@triton.jit
def w_tile(p8, p16, p32, row_off, nmask, k0, K, QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr,
           Q6S: tl.constexpr = False):
    """W's [BN, S * G] tile at inputs k0.. in float32 (input order); rows or groups past K are zero.
    Q6S: Q6_K in layout.split_q6_k's layout, pointers from mm_views(split=True)."""
    if QT == 12:
        w = _tile_q4_k(p8, p16, p32, row_off, nmask, k0)
    elif QT == 14 and Q6S:
        w = _tile_q6_k_split(p8, p16, p32, row_off, nmask, k0)
    elif QT == 14:
        w = _tile_q6_k(p8, p16, row_off, nmask, k0)
    else:
        gg = tl.arange(0, G)[None, :, None]
        m3 = nmask & ((k0 + gg * S) < K)  # whole groups: K is a multiple of the block
        w = tl.reshape(dequant_tile(p8, p16, row_off, m3, k0, QT, G), [row_off.shape[0], S * G])
    return w


@triton.jit
def _mm_kernel(x_ptr, w_ptr, w16_ptr, w32_ptr, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm, stride_ym, w_row,
               steps_per_split, QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
               SWAP: tl.constexpr = True, Q6S: tl.constexpr = False):
    # program (n tile, m tile, split s): rows [BM], columns [BN], K steps [s * sps, (s + 1) * sps);
    # w_row: bytes per weight row; SPLIT: write fp32 partials ws [splits, M, N] instead of y.
    # SWAP: accumulate y.T [BN, BM] = W [BN, BK] @ x.T [BK, BM], the dequantized weights as the dot's
    # first operand (they can stay in registers; x.T, the small one, is staged through shared memory)
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    BK: tl.constexpr = S * G
    row_off = rn.to(tl.int64)[:, None, None] * w_row  # [BN, 1, 1] byte offset of each weight row
    nm3 = nmask[:, None, None]
    acc = tl.zeros([BN, BM] if SWAP else [BM, BN], dtype=tl.float32)
    k_lo = split * steps_per_split * BK
    k_hi = tl.minimum(k_lo + steps_per_split * BK, K)
    for k0 in range(k_lo, k_hi, BK):
        w = w_tile(w_ptr, w16_ptr, w32_ptr, row_off, nm3, k0, K, QT, S, G, Q6S)
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=mmask[:, None] & (kk[None, :] < K), other=0.0)  # [BM, BK]
        if SWAP:
            acc = mm_dot(w.to(x.dtype), tl.trans(x), acc, IEEE)
        else:
            acc = mm_dot(x, tl.trans(w.to(x.dtype)), acc, IEEE)
    if SWAP:
        acc = tl.trans(acc)  # [BM, BN]
    omask = mmask[:, None] & nmask[None, :]
    if SPLIT:
        tl.store(ws_ptr + (split * M + rm.to(tl.int64))[:, None] * N + rn[None, :], acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


@triton.jit
def mm_dot(a, b, acc, IEEE: tl.constexpr):
    if IEEE:  # fp32: exact products (tf32 would round x and W to 10 bits)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


def mm_views(raw: torch.Tensor, qt: int, split: bool = False) -> tuple[torch.Tensor, ...]:
    """w_tile's (p8, p16, p32) of raw uint8 [out, row_bytes]: the bytes, int16 and (Q4_K rows: 144-byte
    multiples) int32 views; split (Q6_K in layout.split_q6_k's layout): the bytes, the d's as int16,
    the 208-byte blocks as int32 words."""
    if split:
        if int(qt) != 14:
            raise ValueError(f"the split layout is Q6_K's (14), not type {int(qt)}")
        p8, pd, p32 = q6k_views(raw)
        return p8, pd.view(torch.int16), p32
    p16 = raw.reshape(-1).view(torch.int16)
    return raw, p16, raw.reshape(-1).view(torch.int32) if int(qt) == 12 else p16


def routed(qtype: Q | int, out_features: int, in_features: int) -> bool:
    """Whether fused_linear runs an [N <= MM_MAX_N, in] x [out, in].T product of this type here."""
    floor = MM_ROUTE.get(qtype)
    return floor is not None and out_features * in_features >= floor


def mm_plan(qtype: Q, m: int, n: int, k: int, launch: tuple[int, int, int] | None = None,
            target: int = TARGET_PROGRAMS, wide: bool = False) -> tuple[int, int, int, int, int]:
    """(BM, BN, num_warps, num_stages, K steps per split) for an [m, k] x [n, k].T product.
    wide: 4-byte x (fp32): MM_LAUNCH always (MM_LAUNCH_LONG_K's 3 stages of fp32 tiles need 235-334 KB
    of shared memory, over the H100's 227 KB: measured, lease 4)."""
    long_k = k >= LONG_K and not wide
    bn, warps, stages = launch or (MM_LAUNCH_LONG_K if long_k else MM_LAUNCH)
    s, g = MM_TILES[qtype]
    bm = row_tile(m)
    return bm, bn, warps, stages, steps_per_split(triton.cdiv(k, s * g), m, n, bm, bn, target)


def batched_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
                   bias: torch.Tensor | None = None, launch: tuple[int, int, int] | None = None,
                   target: int = TARGET_PROGRAMS, swap: bool = True, split: bool = False) -> torch.Tensor:
    """x [M, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] of `qtype` -> [M, out] in x.dtype (+ bias).
    launch: (BN, warps, stages) instead of MM_LAUNCH(_LONG_K); target: programs to aim for with split-K;
    swap: W as the dot's first operand (y.T = W @ x.T), else x first; split: Q6_K in layout.split_q6_k's
    layout (the same values as the GGUF blocks' product, bit for bit)."""
    qt = Q(int(qtype))
    x = x.contiguous()
    m, k = x.shape
    s, g = MM_TILES[qt]
    w_row = row_bytes(qt, in_features)
    if k != in_features or raw.dtype != torch.uint8 or raw.numel() != out_features * w_row:
        raise ValueError(f"x must be [M, {in_features}] and raw uint8 [{out_features}, {w_row}]")
    raw = raw.contiguous()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    bm, bn, warps, stages, sps = mm_plan(qt, m, out_features, k, launch, target, x.element_size() > 2)
    splits = triton.cdiv(triton.cdiv(k, s * g), sps)
    ws = partials(splits, y)
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    _mm_kernel[grid](x, *mm_views(raw, qt, split), bias, y, ws, m, out_features, k, x.stride(0),
                     y.stride(0), w_row, sps, QT=int(qt), S=s, G=g, BM=bm, BN=bn, SPLIT=splits > 1,
                     HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, SWAP=swap, Q6S=split,
                     num_warps=warps, num_stages=stages)
    reduce_partials(ws, bias, y)
    return y
