"""Q6_K batched decode product (5..64 rows of 16-bit x) over the raw 210-byte blocks with 4-byte loads.

y[M, N] = x[M, K] @ W[N, K].T. batched_linear reads Q6_K as 2-byte halfwords (blocks are only 2-byte
aligned), gathering each ql byte twice and each qh byte four times, and turns every 6-bit quant into a
float with an int -> float conversion (a quarter-rate instruction on the H100). Here:
  - a row of K % 512 == 0 inputs is an even number of blocks, so every block PAIR starts on a 4-byte word:
    block 2p at word 0 of the pair, block 2p + 1 at byte 210 = word 52 + 2 bytes. Words of the second block
    are rebuilt from two aligned words (hi half of word j, lo half of word j + 1; the second load hits
    L1). Every load is a 4-byte word row that Triton can pipeline (cp.async).
  - one word of ql holds 8 nibbles and one of qh 16 2-bit fields: a word op forms 4 quants at once
    (lo4 | hi2 << 4, one per byte), then each byte becomes a float through the fp32 "magic number"
    (byte | 0x4B000000 is 2^23 + q as fp32, minus 2^23 + 32 gives q - 32 exactly: no int -> float
    conversion; MAGIC=False converts instead, for the comparison).
One program owns BN weight rows and all BM rows of x (each weight read once per step): per (block,
half n, nibble h) a [BN, 64] tile of weights d * sc * (q - 32) in x's dtype times x.T [64, BM] into an
fp32 [BN, BM] accumulator (y.T). Split-K over whole pairs (split_k.py: fp32 partials summed in split
order by one reduce: deterministic). Not batch-invariant.
Element order (ggml): half n (128 inputs), quarter t, l < 32: input 128n + 32t + l = nibble t // 2 of
ql[64n + 32(t % 2) + l] | bits 2t.. of qh[32n + l] << 4, scale scales[8n + 2t + l // 16], d at byte 208.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.split_k import TARGET_PROGRAMS, partials, reduce_partials, row_tile, steps_per_split

# fused_linear sends 5..64-row products of Q6_K matrices of >= Q6K_MIN_WEIGHTS weights here (the 7B
# ffn_down and LM head; the 0.5B's small Q6_K matrices keep their path)
Q6K_MIN_WEIGHTS = 1 << 24
# (BN weight rows per program, num_warps, num_stages): the H100 sweep (bench/kernels/mmq_q6k.py)
Q6K_LAUNCH = (64, 4, 3)
Q6K_LAUNCH_LONG_K = (64, 4, 3)
LONG_K = 8192


@triton.jit
def _blk_words(p32, base, off, nmask, SHIFT: tl.constexpr):
    """int32 words `off` of a block whose first byte is word `base` (+ 2 bytes when SHIFT)."""
    w = tl.load(p32 + base + off, mask=nmask, other=0)
    if SHIFT:  # bytes 2.. of word j and 0..1 of word j + 1
        w2 = tl.load(p32 + base + off + 1, mask=nmask, other=0)
        w = ((w >> 16) & 0xFFFF) | (w2 << 16)
    return w


@triton.jit
def _q6k_half(acc, p32, base, nmask, d, x_ptr, rm, mmask, K, k0, n: tl.constexpr, SHIFT: tl.constexpr,
              MAGIC: tl.constexpr):
    """Half n (inputs k0 + 128n .. + 128) of one block per row into acc [BN, BM]. Tiles are
    [BN, s, q, v(, i)]: ql word 16n + 8s + 4q + v holds bytes l = 16q + 4v + i of quarter s (lo nibble)
    and s + 2 (hi nibble); qh word 8n + 4q + v the 2-bit fields of those l."""
    s = tl.arange(0, 2)[None, :, None, None]
    q = tl.arange(0, 2)[None, None, :, None]
    v = tl.arange(0, 4)[None, None, None, :]
    ql = _blk_words(p32, base, 16 * n + 8 * s + 4 * q + v, nmask, SHIFT)  # [BN, 2, 2, 4]
    qh = _blk_words(p32, base, 32 + 8 * n + 4 * q + v, nmask, SHIFT)  # [BN, 1, 2, 4]
    i = tl.arange(0, 4)[None, None, None, None, :]
    for h in tl.static_range(2):  # quarters s + 2h
        q6 = ((ql >> (4 * h)) & 0x0F0F0F0F) | (((qh >> (2 * s + 4 * h)) & 0x03030303) << 4)
        scw = _blk_words(p32, base, 48 + 2 * n + h, nmask, SHIFT)  # [BN, 1, 1, 1]
        sc = ((scw << (24 - 8 * (2 * s + q))) >> 24).to(tl.float32)  # int8 scales[8n + 4h + 2s + q]
        b = (q6[:, :, :, :, None] >> (8 * i)) & 0xFF  # [BN, 2, 2, 4, 4]: q in 0..63
        if MAGIC:
            qf = (b | 0x4B000000).to(tl.float32, bitcast=True) - 8388640.0  # 2^23 + 32
        else:
            qf = (b - 32).to(tl.float32)
        w = qf * (d * sc)[:, :, :, :, None]  # [BN, 2, 2, 4, 4] in input order (s, q, v, i)
        k = k0 + 128 * n + 64 * h
        kk = k + tl.arange(0, 64)
        xt = tl.load(x_ptr + rm.to(tl.int64)[None, :] * K + kk[:, None], mask=mmask[None, :], other=0.0)
        acc = tl.dot(tl.reshape(w, [w.shape[0], 64]).to(xt.dtype), xt, acc)
    return acc


@triton.jit
def _q6k_block(acc, p32, base, nmask, x_ptr, rm, mmask, K, k0, SHIFT: tl.constexpr, MAGIC: tl.constexpr):
    """One block per row (inputs k0..k0 + 256, first byte at word base [BN, 1, 1, 1] (+ 2 bytes: SHIFT))."""
    dw = tl.load(p32 + base + 52, mask=nmask, other=0)  # d: bytes 208..209 of the block
    d16 = (dw >> 16) & 0xFFFF if SHIFT else dw & 0xFFFF
    d = d16.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)  # [BN, 1, 1, 1]
    for n in tl.static_range(2):
        acc = _q6k_half(acc, p32, base, nmask, d, x_ptr, rm, mmask, K, k0, n, SHIFT, MAGIC)
    return acc


@triton.jit
def _q6k_kernel(x_ptr, p32, b_ptr, y_ptr, ws_ptr, M, N, K, stride_ym, row_words, pairs_per_split,
                BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                MAGIC: tl.constexpr):
    # program (n tile, m tile, split s): weight rows [BN], x rows [BM] (x contiguous [M, K]), block
    # pairs of split s; row_words: int32 words per weight row; SPLIT: fp32 partials ws [splits, M, N]
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    split = tl.program_id(2)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = (rn < N)[:, None, None, None]
    row = rn.to(tl.int64)[:, None, None, None] * row_words  # [BN, 1, 1, 1] word offset of each row
    acc = tl.zeros([BN, BM], dtype=tl.float32)  # y.T tile
    p_lo = split * pairs_per_split
    p_hi = tl.minimum(p_lo + pairs_per_split, K // 512)
    for p in range(p_lo, p_hi):
        base = row + p * 105
        acc = _q6k_block(acc, p32, base, nmask, x_ptr, rm, mmask, K, 512 * p, False, MAGIC)
        acc = _q6k_block(acc, p32, base + 52, nmask, x_ptr, rm, mmask, K, 512 * p + 256, True, MAGIC)
    rn1 = rn[:, None]
    omask = (rn1 < N) & mmask[None, :]
    if SPLIT:
        tl.store(ws_ptr + (split * M + rm.to(tl.int64))[None, :] * N + rn1, acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn1, mask=rn1 < N, other=0.0).to(tl.float32)
        tl.store(y_ptr + rm.to(tl.int64)[None, :] * stride_ym + rn1, acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


def q6k_ok(qtype: Q | int, in_features: int, dtype: torch.dtype) -> bool:
    """Whether this kernel can take the product: Q6_K, whole block pairs per row, 16-bit x."""
    return int(qtype) == Q.Q6_K and in_features % 512 == 0 and dtype in (torch.bfloat16, torch.float16)


def q6k_routed(qtype: Q | int, out_features: int, in_features: int, dtype: torch.dtype) -> bool:
    """Whether fused_linear sends a 5..64-row product here (q6k_ok and >= Q6K_MIN_WEIGHTS weights)."""
    return q6k_ok(qtype, in_features, dtype) and out_features * in_features >= Q6K_MIN_WEIGHTS


def q6k_plan(m: int, n: int, k: int, launch: tuple[int, int, int] | None = None,
             target: int = TARGET_PROGRAMS) -> tuple[int, int, int, int, int]:
    """(BM, BN, num_warps, num_stages, block pairs per split) for an [m, k] x [n, k].T product."""
    bn, warps, stages = launch or (Q6K_LAUNCH_LONG_K if k >= LONG_K else Q6K_LAUNCH)
    bm = row_tile(m)
    return bm, bn, warps, stages, steps_per_split(k // 512, m, n, bm, bn, target)


def q6k_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
               bias: torch.Tensor | None = None, launch: tuple[int, int, int] | None = None,
               target: int = TARGET_PROGRAMS, magic: bool = True) -> torch.Tensor:
    """x [M, in] (bf16/fp16), raw uint8 [out, row_bytes] of Q6_K (in % 512 == 0) -> [M, out] in x.dtype
    (+ bias [out]). launch: (BN, warps, stages); target: programs for split-K; magic: see the module."""
    m, k = x.shape
    w_row = row_bytes(Q.Q6_K, in_features)
    if not q6k_ok(Q.Q6_K, in_features, x.dtype) or k != in_features:
        raise ValueError(f"q6k_linear: in % 512 == 0, 16-bit x [M, {in_features}]")
    if raw.dtype != torch.uint8 or raw.numel() != out_features * w_row:
        raise ValueError(f"raw must be uint8 [{out_features}, {w_row}]")
    x, raw = x.contiguous(), raw.contiguous()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    bm, bn, warps, stages, pps = q6k_plan(m, out_features, k, launch, target)
    splits = triton.cdiv(k // 512, pps)
    ws = partials(splits, y)
    grid = (triton.cdiv(out_features, bn), triton.cdiv(m, bm), splits)
    _q6k_kernel[grid](x, raw.view(-1).view(torch.int32), bias, y, ws, m, out_features, k, y.stride(0),
                      w_row // 4, pps, BM=bm, BN=bn, SPLIT=splits > 1, HAS_BIAS=bias is not None,
                      MAGIC=magic, num_warps=warps, num_stages=stages)
    reduce_partials(ws, bias, y)
    return y

