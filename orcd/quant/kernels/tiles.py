"""Triton helpers that dequantize a tile of GGUF blocks straight from raw bytes.

Every helper returns float32 of shape [BO, G, S]: BO output rows, G groups along the input axis that
share one scale, S elements per group (the tile covers BK = G * S consecutive inputs starting at k0,
k0 a multiple of the type's block size). `p8` points at the raw uint8 bytes, `p16` at the same bytes
viewed as int16 (scales are fp16 at even byte offsets: every block size and row size here is even).
`row_off` [BO, 1, 1] int64 is each row's byte offset (row * row_bytes); `rmask` [BO, 1, 1] its validity.

Layouts (gguf-py quants.py / ggml-common.h):
  Q8_0  34 B / 32:  d f16 | qs int8[32]                         y = d * q
  Q5_0  22 B / 32:  d f16 | qh u32 | qs u8[16]                  y = d * ((lo4 | hi1 << 4) - 16)
  Q4_K 144 B / 256: d f16 | dmin f16 | scales u8[12] | qs[128]  y = d * sc[j] * q - dmin * m[j]
  Q6_K 210 B / 256: ql[128] | qh[64] | scales i8[16] | d f16    y = d * sc[g] * ((lo4 | hi2 << 4) - 32)
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _f16_at(p16, byte_off, mask):
    """fp16 stored at an even byte offset -> float32."""
    v = tl.load(p16 + byte_off // 2, mask=mask, other=0)
    return v.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def tile_q8_0(p8, p16, row_off, rmask, k0, G: tl.constexpr):
    # quants read as 16 halfwords per block (blocks are only 2-byte aligned): half the loads of bytes
    g = tl.arange(0, G)[None, :, None]
    h = tl.arange(0, 16)[None, None, :]
    blk_off = row_off + (k0 // 32 + g) * 34  # [BO, G, 1]
    d = _f16_at(p16, blk_off, rmask)
    v = tl.load(p16 + blk_off // 2 + 1 + h, mask=rmask, other=0).to(tl.int32)  # sign-extended
    q = tl.join(((v << 24) >> 24).to(tl.float32), (v >> 8).to(tl.float32))  # [BO, G, 16, 2]: 2h, 2h+1
    return d * tl.reshape(q, [q.shape[0], G, 32])


@triton.jit
def tile_q5_0(p8, p16, row_off, rmask, k0, G: tl.constexpr):
    g = tl.arange(0, G)[None, :, None]
    blk_off = row_off + (k0 // 32 + g) * 22
    d = _f16_at(p16, blk_off, rmask)
    # qh: little-endian u32 at byte 2, read as two u16 halves (only 2-byte aligned)
    h_lo = tl.load(p16 + blk_off // 2 + 1, mask=rmask, other=0).to(tl.uint16, bitcast=True).to(tl.uint32)
    h_hi = tl.load(p16 + blk_off // 2 + 2, mask=rmask, other=0).to(tl.uint16, bitcast=True).to(tl.uint32)
    qh = (h_lo | (h_hi << 16)).to(tl.int32, bitcast=True)
    # qs: 8 halfwords; halfword u holds bytes 2u, 2u+1: low nibbles are elements 2u, 2u+1, high 2u+16, 2u+17
    v = tl.load(p16 + blk_off // 2 + 3 + tl.arange(0, 8)[None, None, :], mask=rmask, other=0).to(tl.int32)
    lo = tl.reshape(tl.join(v & 0xF, (v >> 8) & 0xF), [v.shape[0], G, 16])  # elements 0..15
    hi = tl.reshape(tl.join((v >> 4) & 0xF, (v >> 12) & 0xF), [v.shape[0], G, 16])  # elements 16..31
    q = tl.reshape(tl.permute(tl.join(lo, hi), (0, 1, 3, 2)), [v.shape[0], G, 32])
    j = tl.arange(0, 32)[None, None, :]
    return d * ((q | (((qh >> j) & 1) << 4)) - 16).to(tl.float32)


@triton.jit
def tile_q4_k(p8, p16, row_off, rmask, k0, G: tl.constexpr):
    # groups are the 32-element sub-blocks (8 per 256-block); G must be a multiple of 8
    gg = tl.arange(0, G)[None, :, None]
    b = tl.arange(0, 32)[None, None, :]
    sb = k0 // 256 + gg // 8
    j = gg % 8
    blk_off = row_off + sb * 144
    d = _f16_at(p16, blk_off, rmask)
    dmin = _f16_at(p16, blk_off + 2, rmask)
    sc_off = blk_off + 4
    lowj = j < 4
    a = tl.load(p8 + sc_off + tl.where(lowj, j, j + 4), mask=rmask, other=0).to(tl.int32)
    bb = tl.load(p8 + sc_off + tl.where(lowj, j + 4, j - 4), mask=rmask, other=0).to(tl.int32)
    c = tl.load(p8 + sc_off + j, mask=rmask, other=0).to(tl.int32)
    sc = tl.where(lowj, a & 63, (a & 0xF) | ((bb >> 6) << 4))
    m = tl.where(lowj, bb & 63, (a >> 4) | ((c >> 6) << 4))
    qs = tl.load(p8 + blk_off + 16 + (j // 2) * 32 + b, mask=rmask, other=0).to(tl.int32)
    q = (qs >> ((j % 2) * 4)) & 0xF
    return (d * sc.to(tl.float32)) * q.to(tl.float32) - dmin * m.to(tl.float32)


@triton.jit
def tile_q6_k(p8, p16, row_off, rmask, k0, G: tl.constexpr, SPLIT: tl.constexpr = False):
    # groups are the 16-element scale groups (16 per 256-block); G must be a multiple of 16. SPLIT
    # (layout.split_q6_k): block (r, b) = row_off // 210 + b at byte * 208, p16 the d's (one per block)
    gg = tl.arange(0, G)[None, :, None]
    l = tl.arange(0, 16)[None, None, :]
    sb = k0 // 256 + gg // 16
    gi = gg % 16
    if SPLIT:
        blk = row_off // 210 + sb  # row_off = r * nb * 210
        blk_off = blk * 208
        d = tl.load(p16 + blk, mask=rmask, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        blk_off = row_off + sb * 210
        d = _f16_at(p16, blk_off + 208, rmask)
    sc = tl.load(p8 + blk_off + 192 + gi, mask=rmask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
    h = gi // 8
    ql = tl.load(p8 + blk_off + h * 64 + (gi % 4) * 16 + l, mask=rmask, other=0).to(tl.int32)
    ql = (ql >> (((gi % 8) // 4) * 4)) & 0xF
    qh = tl.load(p8 + blk_off + 128 + h * 32 + (gi % 2) * 16 + l, mask=rmask, other=0).to(tl.int32)
    qh = (qh >> (((gi % 8) // 2) * 2)) & 3
    return (d * sc) * ((ql | (qh << 4)) - 32).to(tl.float32)


@triton.jit
def dequant_tile(p8, p16, row_off, rmask, k0, QT: tl.constexpr, G: tl.constexpr, SPLIT: tl.constexpr = False):
    """Dispatch on the GGML type id (constexpr): 8 Q8_0, 6 Q5_0, 12 Q4_K, 14 Q6_K (SPLIT: its split
    layout, p16 the d's)."""
    if QT == 8:
        w = tile_q8_0(p8, p16, row_off, rmask, k0, G)
    elif QT == 6:
        w = tile_q5_0(p8, p16, row_off, rmask, k0, G)
    elif QT == 12:
        w = tile_q4_k(p8, p16, row_off, rmask, k0, G)
    else:
        w = tile_q6_k(p8, p16, row_off, rmask, k0, G, SPLIT)
    return w
