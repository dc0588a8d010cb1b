"""Q4_K weights for the int8 GEMVs (gemv_int8.py) in int32 loads only: each block's head in one 16-byte load.

A Q4_K block is 144 bytes = 36 int32 words: word 0 holds d (low half) and dmin (high half) as fp16, words
1..3 the 12 bytes q[0..11] of 6-bit scales/mins, words 4..35 the nibbles. 144 = 9 x 16 and a row is a
whole number of blocks, so every block (its head: words 0..3) starts 16-byte aligned in the raw tensor:
one int32 x 4 load per block and row instead of gemv_tiles._k4_scale_min's byte loads (2 halfword + 6
byte loads per chunk). q4k_scales turns the words into the values gemv_tiles._w_q4_k gives, bit for bit.
ggml's get_scale_min_k4 for sub-block j: j < 4: sc = q[j] & 63, m = q[j + 4] & 63; j >= 4:
sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4).
The words are loaded with the nibbles (before the PDL wait) and decoded next to the dot products: decoded
early, the six floats per chunk and matrix stayed live across the x loads (more registers at NT >= 2).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def q4k_words(p32, blk16, c, w, m):
    """Head words w0..w3 [A, B, C, 1] and chunk c's nibble words q [A, B, C, 8] of the blocks at blk16
    (halfword offsets, [A, B, C, 1]; c in 0..3, w = arange(8) on the last axis, m the mask)."""
    blkw = blk16 // 2  # int32 index of the block's first word: a multiple of 4 (16-byte aligned)
    hw = tl.load(p32 + tl.multiple_of(blkw, (4, 4, 4, 4)) + tl.arange(0, 4)[None, None, None, :], mask=m,
                 other=0)  # [A, B, C, 4]
    even, odd = tl.split(tl.reshape(hw, (hw.shape[0], hw.shape[1], hw.shape[2], 2, 2)))
    w0, w2 = tl.split(even)
    w1, w3 = tl.split(odd)
    q = tl.load(p32 + tl.multiple_of(blkw + 4 + c * 8, (4, 4, 4, 4)) + w, mask=m, other=0)
    return w0[:, :, :, None], w1[:, :, :, None], w2[:, :, :, None], w3[:, :, :, None], q


@triton.jit
def _fp16_bits(h):
    """The low 16 bits of int32 h as an fp16, widened to float32."""
    return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def q4k_scales(w0, w1, w2, w3, c):
    """(d, dmin, sc_lo, m_lo, sc_hi, m_hi) float32 from head words w0..w3: chunk c's sub-blocks 2c (lo)
    and 2c + 1 (hi)."""
    sh = (c & 1) * 16  # bytes 2c % 4 and 2c % 4 + 1 of words 1..3 to bits 0..7 and 8..15
    a1, a2, a3 = w1 >> sh, w2 >> sh, w3 >> sh
    hi = c >= 2  # sub-blocks 4..7: low 4 bits from q[j + 4] (word 3), top 2 from q[j - 4] (1) / q[j] (2)
    s2 = tl.where(hi, 2, 0)  # (q >> 6) << 4 == (q >> 2) & 0x30; j < 4: q & 0x30 itself
    sc4 = tl.where(hi, a3, a1)
    m4 = tl.where(hi, a3 >> 4, a2)
    sc_lo = (sc4 & 0xF) | ((a1 >> s2) & 0x30)
    m_lo = (m4 & 0xF) | ((a2 >> s2) & 0x30)
    sc_hi = ((sc4 >> 8) & 0xF) | ((a1 >> (s2 + 8)) & 0x30)
    m_hi = ((m4 >> 8) & 0xF) | ((a2 >> (s2 + 8)) & 0x30)
    return (_fp16_bits(w0), _fp16_bits(w0 >> 16), sc_lo.to(tl.float32), m_lo.to(tl.float32),
            sc_hi.to(tl.float32), m_hi.to(tl.float32))
