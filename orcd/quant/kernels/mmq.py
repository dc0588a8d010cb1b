"""Batched decode product on tensor cores over raw Q4_K / Q6_K blocks (llama.cpp's MMQ idea), two paths.

y[M, N] = x[M, K] @ W[N, K].T for M = 5..64 decode rows. A program owns BN weight rows and all M rows
(BM = next power of two >= M, 16..64), so each weight block is read from memory once. One loop step is
one 64-input chunk (Q4_K: 32 quant bytes, two sub-blocks; Q6_K: a quarter super-block); its weight
loads are 4- or 16-byte rows that Triton pipelines (cp.async, num_stages).
  float_w (what fused_linear uses, Q4_K only): the chunk's quants dequantized to x's dtype in registers,
  one bf16/fp16 tl.dot [BN, 32] x [32, BM] per sub-block into an fp32 [BN, BM] accumulator.
  int8 (the MMQ arithmetic; measured slower on the H100, bench/results/mmq_7b*.md): x quantized to int8
  per 32 (mmq_x.py: xq, dx = max|x| / 127, the sum of x per 32), the quants unpacked to int8, one int8
  tl.dot -> int32 per sub-block, the scales applied in fp32:
    Q4_K (w = d*sc_j*q - dmin*m_j, q in 0..15): acc += d*sc_j * dx_j * dot(q, xq) - dmin*m_j * sum_j(x)
    Q6_K (w = d*sc_i*(q - 32) per 16, q in 0..63): the two 16-halves of a 32 chunk are two dots, the
    other half zeroed (int8 dots need K >= 32): acc += d * dx_j * (sc_a * dot_a + sc_b * dot_b)
  x's sum (not its rounded values) multiplies Q4_K's mins, as in the int8 GEMVs (xquant.py).
Where the N tiles are too few to fill the GPU, K is split (split_k.py: fp32 partials summed in split
order by one reduce kernel: deterministic). Not batch-invariant: invariant steps keep
invariant_linear.
"""

from __future__ import annotations

import types

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.mmq_x import quantize_x32
from orcd.quant.kernels.split_k import TARGET_PROGRAMS, partials, reduce_partials, row_tile, steps_per_split

BLOCK_BYTES = types.MappingProxyType({Q.Q4_K: 144, Q.Q6_K: 210})  # one 256-input super-block per K step
# type -> (BN weight rows per program, num_warps, num_stages) of the bf16-w path, from the H100 sweep
# (bench/kernels/mmq.py, bench/results/mmq_7b.md): Q4_K BN 128, 4 warps, 3 stages (gate/up at M = 16:
# 44.6 us against batched_linear's 64.1). Q6_K's best (128, 8, 2) still lost 10x to batched_linear
# (its 210-byte blocks allow no 16-byte loads; the word gathers here are slow): not routed.
MMQ_LAUNCH = types.MappingProxyType({Q.Q4_K: (128, 4, 3), Q.Q6_K: (128, 8, 2)})
MMQ_ROUTE = frozenset({Q.Q4_K})  # types fused_linear sends here
# split-K target (programs) by BM: 16-row tiles (M <= 16) split K twice as far as split_k's 264 (H100, 7B,
# M = 8, bench/results/mmq_targets_h100.md: gate/up 44.7 -> 38.5 us, down 41.6 -> 39.8, q/o 14.3 -> 13.8;
# at M = 64 528 won on gate/up and lost on down, so larger tiles keep 264)
MMQ_TARGET = types.MappingProxyType({16: 2 * TARGET_PROGRAMS})


@triton.jit
def _x_cols(xq_ptr, xd_ptr, rm, mmask, K, k):
    """x's 32 inputs k.. of every row as the dot's [32, BM] int8 operand, and their dx [BM]."""
    ll = tl.arange(0, 32)
    xt = tl.load(xq_ptr + rm.to(tl.int64)[None, :] * K + k + ll[:, None], mask=mmask[None, :], other=0)
    dx = tl.load(xd_ptr + rm * (K // 32) + k // 32, mask=mmask, other=0.0)
    return xt, dx


@triton.jit
def _xf_cols(x_ptr, rm, mmask, K, k):
    """x's 32 inputs k.. of every row as a [32, BM] float operand (x contiguous [M, K])."""
    ll = tl.arange(0, 32)
    return tl.load(x_ptr + rm.to(tl.int64)[None, :] * K + k + ll[:, None], mask=mmask[None, :], other=0.0)


@triton.jit
def _word(hdr, i: tl.constexpr):
    """Column i [BN] of an int32 [BN, 4] tile (each row in one thread: no shuffles)."""
    return tl.sum(tl.where(tl.arange(0, 4)[None, :] == i, hdr, 0), axis=1)


@triton.jit
def _q4k_head(hdr, j):
    """d, dmin and sub-block j's 6-bit scale and min (ggml get_scale_min_k4), all float32 [BN], from
    the block's first 16 bytes as int32 words hdr [BN, 4]: d | dmin << 16, then the 12 scale bytes."""
    w0 = _word(hdr, 0)
    w1 = _word(hdr, 1)
    w2 = _word(hdr, 2)
    w3 = _word(hdr, 3)
    d = (w0 & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    dmin = ((w0 >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    lo = j < 4
    sh = 8 * (j % 4)
    sj = (tl.where(lo, w1, w2) >> sh) & 255  # scale byte j
    sj4 = (tl.where(lo, w2, w3) >> sh) & 255  # byte j + 4
    sjm4 = (w1 >> sh) & 255  # byte j - 4 (j >= 4)
    sc = tl.where(lo, sj & 63, (sj4 & 15) | ((sjm4 >> 6) << 4))
    mn = tl.where(lo, sj4 & 63, (sj4 >> 4) | ((sj >> 6) << 4))
    return d * sc.to(tl.float32), dmin * mn.to(tl.float32)


@triton.jit
def _q4k_iter(acc, p8, p32, row, nmask, xq_ptr, xd_ptr, xs_ptr, rm, mmask, K, it, FLOAT: tl.constexpr):
    """Inputs 64 * it.. of BN rows (byte offsets row [BN]) into acc [BN, BM]: chunk c = it % 4 of
    super-block it // 4, whose 32 bytes hold sub-block 2c in their low nibbles, 2c + 1 in their high.
    All weight loads are 16-byte rows (the header, the chunk): Triton pipelines them (cp.async)."""
    ll = tl.arange(0, 32)
    blk = row + (it // 4) * 144
    c = it % 4
    hdr = tl.load(p32 + (blk // 4)[:, None] + tl.arange(0, 4)[None, :], mask=nmask[:, None], other=0)
    q = tl.load(p8 + blk[:, None] + 16 + 32 * c + ll[None, :], mask=nmask[:, None], other=0)
    for h in tl.static_range(2):
        k = 64 * it + 32 * h
        a, b = _q4k_head(hdr, 2 * c + h)  # d * sc_j, dmin * m_j
        if FLOAT:  # xq_ptr is x itself: W dequantized to x's dtype, one float dot
            xt = _xf_cols(xq_ptr, rm, mmask, K, k)
            w = a[:, None] * ((q >> (4 * h)) & 15).to(tl.float32) - b[:, None]
            acc = tl.dot(w.to(xt.dtype), xt, acc)
        else:
            xt, dx = _x_cols(xq_ptr, xd_ptr, rm, mmask, K, k)
            sx = tl.load(xs_ptr + rm * (K // 32) + k // 32, mask=mmask, other=0.0)
            dot = tl.dot(((q >> (4 * h)) & 15).to(tl.int8), xt)  # int32 [BN, BM]
            acc += dot.to(tl.float32) * a[:, None] * dx[None, :] - b[:, None] * sx[None, :]
    return acc


@triton.jit
def _bytes_at(p32, base, lo, off, nmask):
    """Bytes at byte offsets 4 * base + lo + off (base int64 [BN, 1], lo = 0..3 int32 [BN, 1], off int32
    [1, X]; any alignment: Q6_K blocks are 210 bytes) as int32 0..255, each from the int32 word that
    holds it (4-byte loads, so Triton can pipeline them with cp.async)."""
    b = lo + off
    wd = tl.load(p32 + base + b // 4, mask=nmask[:, None], other=0)
    return (wd >> (8 * (b % 4))) & 255


@triton.jit
def _q6k_iter(acc, p32, row, nmask, xq_ptr, xd_ptr, rm, mmask, K, it, FLOAT: tl.constexpr):
    """Q6_K quarter g = it % 4 = (n, t2) of super-block it // 4 into acc [BN, BM]: for half n (128
    inputs), quarter t, l < 32, input 128n + 32t + l = the low (t < 2) or high nibble of
    ql[64n + 32(t % 2) + l] | bits 2t.. of qh[32n + l] << 4, minus 32, scale scales[8n + 2t + l // 16];
    this iteration does t = t2 and t2 + 2 (the same ql bytes). d: the fp16 at byte 208."""
    ll = tl.arange(0, 32)[None, :]
    first = ll < 16
    n = (it % 4) // 2
    t2 = it % 2
    blk = (row + (it // 4) * 210)[:, None]  # [BN, 1] byte offsets of the blocks
    base = blk // 4
    lo = (blk % 4).to(tl.int32)
    ql = _bytes_at(p32, base, lo, 64 * n + 32 * t2 + ll, nmask)
    qh = _bytes_at(p32, base, lo, 128 + 32 * n + ll, nmask)
    col = tl.arange(0, 8)[None, :]  # 0..3: scales (t2, a), (t2, b), (t2 + 2, a), (t2 + 2, b); 4..7: d
    hw = _bytes_at(p32, base, lo, tl.where(col < 4, 192 + 8 * n + 2 * t2 + col % 2 + 4 * (col // 2), 208),
                   nmask)  # d's low byte; its high byte: below
    dw = _bytes_at(p32, base, lo, 209 + 0 * col, nmask)
    d = _col8(hw | (dw << 8), 4).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    for hi in tl.static_range(2):
        t = t2 + 2 * hi
        k = 256 * (it // 4) + 128 * n + 32 * t
        w = (((ql >> (4 * hi)) & 15) | (((qh >> (2 * t)) & 3) << 4)) - 32
        sa = d * _col8(hw, 2 * hi).to(tl.int8).to(tl.float32)
        sb_ = d * _col8(hw, 2 * hi + 1).to(tl.int8).to(tl.float32)
        if FLOAT:
            xt = _xf_cols(xq_ptr, rm, mmask, K, k)
            wf = tl.where(first, sa[:, None], sb_[:, None]) * w.to(tl.float32)
            acc = tl.dot(wf.to(xt.dtype), xt, acc)
        else:
            xt, dx = _x_cols(xq_ptr, xd_ptr, rm, mmask, K, k)
            da = tl.dot(tl.where(first, w, 0).to(tl.int8), xt)
            db = tl.dot(tl.where(first, 0, w).to(tl.int8), xt)
            acc += (da.to(tl.float32) * sa[:, None] + db.to(tl.float32) * sb_[:, None]) * dx[None, :]
    return acc


@triton.jit
def _col8(t, i: tl.constexpr):
    """Column i [BN] of an int32 [BN, 8] tile."""
    return tl.sum(tl.where(tl.arange(0, 8)[None, :] == i, t, 0), axis=1)


@triton.jit
def _mmq_kernel(xq_ptr, xd_ptr, xs_ptr, w8, w32, b_ptr, y_ptr, ws_ptr, M, N, K, stride_ym, w_row,
                steps_per_split, QT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, FLOAT: tl.constexpr):
    # program (n tile, m tile, split s): weight rows [BN], x rows [BM], super-blocks of split s;
    # w_row: bytes per weight row; SPLIT: fp32 partials ws [splits, M, N] instead of y
    pid_n = tl.program_id(0)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    split = tl.program_id(2)
    rn = pid_n * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    row = rn.to(tl.int64) * w_row  # [BN] byte offset of each weight row
    acc = tl.zeros([BN, BM], dtype=tl.float32)  # y.T tile
    it_lo = split * steps_per_split * 4  # 4 iterations per super-block
    it_hi = tl.minimum(it_lo + steps_per_split * 4, K // 64)
    for it in range(it_lo, it_hi):
        if QT == 12:
            acc = _q4k_iter(acc, w8, w32, row, nmask, xq_ptr, xd_ptr, xs_ptr, rm, mmask, K, it, FLOAT)
        else:
            acc = _q6k_iter(acc, w32, row, nmask, xq_ptr, xd_ptr, rm, mmask, K, it, FLOAT)
    omask = nmask[:, None] & mmask[None, :]
    if SPLIT:
        tl.store(ws_ptr + (split * M + rm.to(tl.int64))[None, :] * N + rn[:, None], acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptr + rm.to(tl.int64)[None, :] * stride_ym + rn[:, None], acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


def _words(raw: torch.Tensor) -> torch.Tensor:
    """raw's bytes as int32 words (the tensor padded to a multiple of 4 bytes where it is not: a Q6_K
    matrix of an odd number of rows and blocks); no copy when the size allows."""
    flat = raw.view(-1)
    if flat.numel() % 4:
        flat = torch.cat([flat, flat.new_zeros(4 - flat.numel() % 4)])
    return flat.view(torch.int32)


def mmq_routed(qtype: Q | int, in_features: int, dtype: torch.dtype) -> bool:
    """Whether fused_linear sends a decode batch (GEMV_MAX_N < N <= MM_MAX_N rows) of this product here:
    MMQ_ROUTE's types, 16-bit x (the float_w path; fp32 x keeps batched_linear's exact fp32 dots)."""
    return int(qtype) in MMQ_ROUTE and in_features % 256 == 0 and dtype in (torch.bfloat16, torch.float16)


def mmq_plan(qt: Q, m: int, n: int, k: int, launch: tuple[int, int, int] | None = None,
             target: int | None = None) -> tuple[int, int, int, int, int]:
    """(BM, BN, num_warps, num_stages, super-blocks per split) for an [m, k] x [n, k].T product; target:
    programs for split-K (default MMQ_TARGET's for BM, else TARGET_PROGRAMS)."""
    bn, warps, stages = launch or MMQ_LAUNCH[qt]
    bm = row_tile(m)
    target = target or MMQ_TARGET.get(bm, TARGET_PROGRAMS)
    return bm, bn, warps, stages, steps_per_split(k // 256, m, n, bm, bn, target)


def mmq_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
               bias: torch.Tensor | None = None, launch: tuple[int, int, int] | None = None,
               target: int | None = None, float_w: bool = False) -> torch.Tensor:
    """x [M, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] of Q4_K or Q6_K -> [M, out] in x.dtype
    (+ bias [out]). launch: (BN, warps, stages) instead of MMQ_LAUNCH; target: programs for split-K
    (mmq_plan); float_w: W dequantized to x's dtype (bf16/fp16 x) and float dots instead of int8 x and
    int8 dots."""
    qt = Q(int(qtype))
    m, k = x.shape
    w_row = row_bytes(qt, in_features)
    if qt not in BLOCK_BYTES or k != in_features or k % 256:
        raise ValueError(f"mmq_linear: Q4_K/Q6_K with in % 256 == 0 and x [M, {in_features}]")
    if raw.dtype != torch.uint8 or raw.numel() != out_features * w_row:
        raise ValueError(f"raw must be uint8 [{out_features}, {w_row}]")
    raw = raw.contiguous()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    if float_w:
        xq = xd = xs = x.contiguous()
    else:
        xq, xd, xs = quantize_x32(x)
    bm, bn, warps, stages, sps = mmq_plan(qt, m, out_features, k, launch, target)
    splits = triton.cdiv(k // 256, sps)
    ws = partials(splits, y)
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    w32 = _words(raw)
    _mmq_kernel[grid](xq, xd, xs, raw, w32, bias, y, ws, m, out_features, k,
                      y.stride(0), w_row, sps, QT=int(qt), BM=bm, BN=bn, SPLIT=splits > 1,
                      HAS_BIAS=bias is not None, FLOAT=float_w, num_warps=warps, num_stages=stages)
    reduce_partials(ws, bias, y)
    return y
