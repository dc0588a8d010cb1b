"""A candidate that lost (kept with its benchmark, bench/kernels/mmq_q4k.py): a batched decode product over
raw Q4_K blocks on tensor cores, nibbles turned into 16-bit floats by bit patterns instead of
integer-to-float conversions.

Result (H100, 7B Q4_K shapes, bench/results/mmq_q4k_h100.md): no faster than mmq.py's float-w path
where it counts. MODE 1 (64, 4, 3) at M = 8: gate/up 42.5 vs 45.1 us, down 45.2 vs 41.1, q/o 13.2 vs
13.9; MODE 0 lost everywhere (55.6 us at best on gate/up), and both lost at M = 64 (67.9 vs 55.5 us).
So the conversions were not what bounds mmq.py at 8 rows (it reads 0.85 TB/s either way); a longer
split-K grid was (mmq.MMQ_TARGET).

y[M, N] = x[M, K] @ W[N, K].T for M = 5..64 decode rows and bf16 / fp16 x. A program owns BN weight rows
and BM rows of x; one loop step is one 256-input super-block (144 bytes a row: a 16-byte head with d,
dmin and the 6-bit scales, then 128 bytes of nibbles), read as int32 words.

Why: mmq.py's float-w path turns every nibble into a float with an integer-to-float conversion (a
quarter-rate instruction on the H100) and a float multiply-add: at 8 rows the 7B's Q4_K products ran at
0.9 TB/s, bound by that arithmetic, not by memory. Here a nibble q becomes a 16-bit float by or-ing it
into the mantissa of a constant: bf16 0x4300 | q is exactly 128 + q (fp16 0x6400 | q is 1024 + q), two
nibbles per 32-bit instruction, no conversion.

A chunk word w (bytes 4w..4w+3 of a 32-byte chunk) holds elements 4w..4w+3 of sub-block 2c in its low
nibbles and of 2c + 1 in its high ones: (w >> s) & 0x000F000F picks two of them (elements 4w + i and 4w +
i + 2 for s = 8i, + 4 for the high nibbles), one in each 16-bit half.

Two ways to apply the scales (MODE):
  0 (scale after the dot): per sub-block j, D = dot(OFF + q, x) in fp32, then
    acc += a_j * D - (OFF * a_j + b_j) * sum_j(x), a_j = d * sc_j, b_j = dmin * m_j:
    the dot is exact integer-weighted sums; the scales are applied in fp32 (more exact than mmq.py).
  1 (scale in 16 bits): w = (OFF + q - OFF) * a_j - b_j in x's dtype, one dot per sub-block into acc
    (mmq.py's numerics, with a_j and b_j rounded to 16 bits first).
Split-K as in mmq.py (split_k.py: fp32 partials summed in order by one reduce kernel).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.split_k import TARGET_PROGRAMS, partials, reduce_partials, row_tile, steps_per_split

Q4_K = 12
BLOCK_WORDS = 36  # 144 bytes per super-block row
# (BN weight rows per program, num_warps, num_stages, MODE): a first guess, to be replaced by a sweep
MMQ4_LAUNCH = (128, 4, 3, 0)
MAGIC = {torch.bfloat16: (0x43004300, 128.0), torch.float16: (0x64006400, 1024.0)}  # (bits x 2, OFF)


@triton.jit
def _col(t, i: tl.constexpr, W: tl.constexpr):
    """Column i [BN] of an int32 [BN, W] tile (a row's words in one thread: no shuffles)."""
    return tl.sum(tl.where(tl.arange(0, W)[None, :] == i, t, 0), axis=1)


@triton.jit
def _scales(hdr, j: tl.constexpr):
    """(d * sc_j, dmin * m_j) float32 [BN] from the head words hdr [BN, 4] (ggml get_scale_min_k4)."""
    w0 = _col(hdr, 0, 4)
    d = (w0 & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    dmin = ((w0 >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    sh: tl.constexpr = 8 * (j % 4)
    if j < 4:
        sc = (_col(hdr, 1, 4) >> sh) & 63
        mn = (_col(hdr, 2, 4) >> sh) & 63
    else:
        lo = (_col(hdr, 3, 4) >> sh) & 255  # byte j + 4: low 4 bits of sc, high 4 of m
        sc = (lo & 15) | (((_col(hdr, 1, 4) >> sh) & 0xC0) >> 2)
        mn = (lo >> 4) | (((_col(hdr, 2, 4) >> sh) & 0xC0) >> 2)
    return d * sc.to(tl.float32), dmin * mn.to(tl.float32)


@triton.jit
def _tile16(v, MAGIC_BITS: tl.constexpr, DT: tl.constexpr):
    """Words v [BN, 8] (each 4 nibbles of interest at bits 0, 8, 16, 24) -> [BN, 32] of OFF + q in DT,
    element 4w + i = the nibble at bits 8i of word w."""
    a = (v & 0x000F000F) | MAGIC_BITS  # elements 4w (low half), 4w + 2 (high half)
    b = ((v >> 8) & 0x000F000F) | MAGIC_BITS  # 4w + 1, 4w + 3
    a2 = tl.join((a & 0xFFFF).to(tl.int16).to(DT, bitcast=True), (a >> 16).to(tl.int16).to(DT, bitcast=True))
    b2 = tl.join((b & 0xFFFF).to(tl.int16).to(DT, bitcast=True), (b >> 16).to(tl.int16).to(DT, bitcast=True))
    t = tl.join(a2, b2)  # [BN, 8, 2, 2]: [w, i, j] = element 4w + 2i + j
    return tl.reshape(t, (v.shape[0], 32))


@triton.jit
def _mmq4_kernel(x_ptr, w32, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm, stride_ym, steps_per_split,
                 MAGIC_BITS: tl.constexpr, OFF: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 MODE: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr):
    # program (n tile, m tile, split s): weight rows [BN], x rows [BM], super-blocks of split s; SPLIT:
    # fp32 partials ws [splits, M, N] instead of y
    DT = x_ptr.dtype.element_ty
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    split = tl.program_id(2)
    nmask = rn < N
    mmask = rm < M
    wrow = rn.to(tl.int64) * (K // 256 * 36)  # [BN] first word of each weight row
    ll = tl.arange(0, 32)
    xrow = x_ptr + rm.to(tl.int64)[None, :] * stride_xm + ll[:, None]  # [32, BM]
    acc = tl.zeros([BN, BM], dtype=tl.float32)  # y.T tile
    s_lo = split * steps_per_split
    s_hi = tl.minimum(s_lo + steps_per_split, K // 256)
    for s in range(s_lo, s_hi):
        base = wrow[:, None] + s * 36
        hdr = tl.load(w32 + base + tl.arange(0, 4)[None, :], mask=nmask[:, None], other=0)
        for c in tl.static_range(4):  # 64-input chunk c: sub-blocks 2c (low nibbles) and 2c + 1
            qw = tl.load(w32 + base + 4 + 8 * c + tl.arange(0, 8)[None, :], mask=nmask[:, None], other=0)
            for h in tl.static_range(2):
                a, b = _scales(hdr, 2 * c + h)
                xt = tl.load(xrow + s * 256 + 64 * c + 32 * h, mask=mmask[None, :], other=0.0)  # [32, BM]
                t = _tile16(qw >> (4 * h), MAGIC_BITS, DT)  # [BN, 32] = OFF + q
                if MODE == 0:
                    dot = tl.dot(t, xt)  # [BN, BM] fp32
                    sx = tl.sum(xt.to(tl.float32), axis=0)  # [BM]
                    acc += a[:, None] * dot - (OFF * a + b)[:, None] * sx[None, :]
                else:
                    w = (t - OFF) * a.to(DT)[:, None] - b.to(DT)[:, None]
                    acc = tl.dot(w.to(DT), xt, acc)
    omask = nmask[:, None] & mmask[None, :]
    if SPLIT:
        tl.store(ws_ptr + (split * M + rm.to(tl.int64))[None, :] * N + rn[:, None], acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptr + rm.to(tl.int64)[None, :] * stride_ym + rn[:, None], acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


def mmq4_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                bias: torch.Tensor | None = None, launch: tuple[int, int, int, int] | None = None,
                target: int = TARGET_PROGRAMS) -> torch.Tensor:
    """x [M, in] bf16/fp16, raw uint8 [out, in / 256 * 144] Q4_K -> [M, out] in x.dtype (+ bias [out]).
    launch: (BN, warps, stages, MODE) instead of MMQ4_LAUNCH; target: programs for split-K."""
    m, k = x.shape
    if x.dtype not in MAGIC or k != in_features or k % 256:
        raise ValueError(f"mmq4_linear: bf16/fp16 x [M, {in_features}], in % 256 == 0")
    if raw.dtype != torch.uint8 or raw.numel() != out_features * (k // 256 * 144):
        raise ValueError(f"raw must be uint8 [{out_features}, {k // 256 * 144}] (Q4_K)")
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    x = x if x.stride(1) == 1 else x.contiguous()
    bn, warps, stages, mode = launch or MMQ4_LAUNCH
    bm = row_tile(m)
    sps = steps_per_split(k // 256, m, out_features, bm, bn, target)
    splits = triton.cdiv(k // 256, sps)
    ws = partials(splits, y)
    bits, off = MAGIC[x.dtype]
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    _mmq4_kernel[grid](x, raw.contiguous().view(-1).view(torch.int32), bias, y, ws, m, out_features, k,
                       x.stride(0), y.stride(0), sps, MAGIC_BITS=bits, OFF=off, BM=bm, BN=bn, MODE=mode,
                       SPLIT=splits > 1, HAS_BIAS=bias is not None, num_warps=warps, num_stages=stages)
    reduce_partials(ws, bias, y)
    return y
