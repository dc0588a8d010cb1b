"""GEMV helpers: partial dot products of GGUF blocks with x, read in 2- or 4-byte units.

Each helper covers G groups of EPG inputs starting at k0 (EPG: 32 Q8_0, 32 Q5_0, 64 Q4_K, 128 Q6_K) and
returns (a, b, rstd): a = float32 [BO, G, U], entry (r, g, u) = sum over the elements decoded from load
unit u of w[r, k] * x[k], scales applied; b = the same for a second matrix (DUAL, read at the same
offsets: SwiGLU's up next to gate, sharing every x load), else a. Loading whole halfwords/words (not
bytes) and folding the scale in per unit keeps the load count per weight low; scales are read once per
group, not per element.
`p8`/`p16`/`p32` (`s8`/`s16`/`s32`: the second matrix): the raw bytes as uint8 / int16 / int32 (Q6_K with
Q6S, layout.split_q6_k's layout: p32 the d's as int16); `row16`
[BO, 1, 1] is each row's offset in int16 units (row * row_bytes / 2); `m` [BO, G, 1] masks invalid rows
and groups, `km` [1, G, 1] groups past K; `xr` points at x's row. With NORM, x is RMSNorm(x) * nw as it
is read. Weights never depend on the previous kernel, x does: each helper issues its weight loads first;
with WAIT (a program's first pass) it then waits for the previous grid (PDL) and computes rstd (NORM)
before touching x. Every program runs one WAIT pass, so a kernel never completes before its predecessor.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
def _sync(xr, K, eps, rstd, WAIT: tl.constexpr, PDL: tl.constexpr, NORM: tl.constexpr):
    """First pass (WAIT): wait for the previous kernel's writes (PDL), then rstd of x; else rstd as given.
    PDL (see fused_linear.PDL_MODE) 3 also lets the next kernel launch right after the wait."""
    if WAIT:
        if PDL:
            tl.extra.cuda.gdc_wait()
        if PDL == 3:
            tl.extra.cuda.gdc_launch_dependents()
        rstd = _rstd(xr, K, eps, NORM)
    return rstd


@triton.jit
def _f16(p16, off16, m):
    return tl.load(p16 + off16, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _ldx(xr, nw, k, mask, rstd, NORM: tl.constexpr):
    """x[k] as float32; with NORM, RMSNorm'd on the fly: bf16-round(round(x * rstd) * nw[k])."""
    x = tl.load(xr + k, mask=mask, other=0.0)
    if NORM:
        xn = (x.to(tl.float32) * rstd).to(x.dtype).to(tl.float32)
        x = (xn * tl.load(nw + k, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
    return x.to(tl.float32)


@triton.jit
def gemv_q8_0(p16, s16, row16, m, km, xr, k0, G: tl.constexpr, nw, rstd, K, eps,
              NORM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr, DUAL: tl.constexpr):
    # block: 17 halfwords = d | 16 x (two int8)
    g = tl.arange(0, G)[None, :, None]
    h = tl.arange(0, 16)[None, None, :]
    blk16 = row16 + (k0 // 32 + g) * 17
    d = _f16(p16, blk16, m)
    v = tl.load(p16 + blk16 + 1 + h, mask=m, other=0).to(tl.int32)  # sign-extended
    d2, v2 = d, v
    if DUAL:
        d2 = _f16(s16, blk16, m)
        v2 = tl.load(s16 + blk16 + 1 + h, mask=m, other=0).to(tl.int32)
    rstd = _sync(xr, K, eps, rstd, WAIT, PDL, NORM)
    kx = k0 + g * 32 + 2 * h
    x0 = _ldx(xr, nw, kx, km, rstd, NORM)
    x1 = _ldx(xr, nw, kx + 1, km, rstd, NORM)
    a = d * (((v << 24) >> 24).to(tl.float32) * x0 + (v >> 8).to(tl.float32) * x1)
    b = a
    if DUAL:
        b = d2 * (((v2 << 24) >> 24).to(tl.float32) * x0 + (v2 >> 8).to(tl.float32) * x1)
    return a, b, rstd


@triton.jit
def _w_q5_0(p16, blk16, h, m):
    """Q5_0 block: 11 halfwords = d | qh (u32 as 2 halfwords) | 8 x (two bytes of nibbles)."""
    d = _f16(p16, blk16, m)
    qh = (tl.load(p16 + blk16 + 1, mask=m, other=0).to(tl.int32) & 0xFFFF) | (
        tl.load(p16 + blk16 + 2, mask=m, other=0).to(tl.int32) << 16)
    v = tl.load(p16 + blk16 + 3 + h, mask=m, other=0).to(tl.int32)
    return d, qh, v


@triton.jit
def _dot_q5_0(d, qh, v, e, x0, x1, x2, x3):
    # unit h holds elements e, e+1 (low nibbles) and e+16, e+17 (high nibbles), e = 2h
    acc = (((v & 0xF) | (((qh >> e) & 1) << 4)) - 16).to(tl.float32) * x0
    acc += ((((v >> 8) & 0xF) | (((qh >> (e + 1)) & 1) << 4)) - 16).to(tl.float32) * x1
    acc += ((((v >> 4) & 0xF) | (((qh >> (e + 16)) & 1) << 4)) - 16).to(tl.float32) * x2
    acc += ((((v >> 12) & 0xF) | (((qh >> (e + 17)) & 1) << 4)) - 16).to(tl.float32) * x3
    return d * acc


@triton.jit
def gemv_q5_0(p16, s16, row16, m, km, xr, k0, G: tl.constexpr, nw, rstd, K, eps,
              NORM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr, DUAL: tl.constexpr):
    g = tl.arange(0, G)[None, :, None]
    h = tl.arange(0, 8)[None, None, :]
    blk16 = row16 + (k0 // 32 + g) * 11
    d, qh, v = _w_q5_0(p16, blk16, h, m)
    d2, qh2, v2 = d, qh, v
    if DUAL:
        d2, qh2, v2 = _w_q5_0(s16, blk16, h, m)
    rstd = _sync(xr, K, eps, rstd, WAIT, PDL, NORM)
    e = 2 * h
    kx = k0 + g * 32 + e
    x0 = _ldx(xr, nw, kx, km, rstd, NORM)
    x1 = _ldx(xr, nw, kx + 1, km, rstd, NORM)
    x2 = _ldx(xr, nw, kx + 16, km, rstd, NORM)
    x3 = _ldx(xr, nw, kx + 17, km, rstd, NORM)
    a = _dot_q5_0(d, qh, v, e, x0, x1, x2, x3)
    b = a
    if DUAL:
        b = _dot_q5_0(d2, qh2, v2, e, x0, x1, x2, x3)
    return a, b, rstd


@triton.jit
def _k4_scale_min(p8, blk16, j, m):
    """Q4_K sub-block j's 6-bit scale and min (bytes 4..15 of the block) as float32."""
    sc8 = blk16 * 2 + 4  # byte offset of scales[0]
    low = j < 4
    a = tl.load(p8 + sc8 + tl.where(low, j, j + 4), mask=m, other=0).to(tl.int32)
    b = tl.load(p8 + sc8 + tl.where(low, j + 4, j - 4), mask=m, other=0).to(tl.int32)
    c = tl.load(p8 + sc8 + j, mask=m, other=0).to(tl.int32)
    sc = tl.where(low, a & 63, (a & 0xF) | ((b >> 6) << 4))
    mn = tl.where(low, b & 63, (a >> 4) | ((c >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)


@triton.jit
def _w_q4_k(p8, p16, p32, blk16, c, w, m):
    """Super-block scales (d, dmin), chunk c's two 6-bit scale/min pairs, its 8 int32 of nibbles."""
    d = _f16(p16, blk16, m)
    dmin = _f16(p16, blk16 + 1, m)
    # sub-blocks j = 2c (low nibbles) and 2c + 1 (high nibbles)
    sc_lo, m_lo = _k4_scale_min(p8, blk16, 2 * c, m)
    sc_hi, m_hi = _k4_scale_min(p8, blk16, 2 * c + 1, m)
    q = tl.load(p32 + blk16 // 2 + 4 + c * 8 + w, mask=m, other=0)  # [BO, G, 8] int32
    return d, dmin, sc_lo, m_lo, sc_hi, m_hi, q


@triton.jit
def _dot_q4_k(d, dmin, sc_lo, m_lo, sc_hi, m_hi, q, i, x_lo, x_hi):
    n_lo = ((q[:, :, :, None] >> (8 * i)) & 0xF).to(tl.float32)
    n_hi = ((q[:, :, :, None] >> (8 * i + 4)) & 0xF).to(tl.float32)
    dot = d * (sc_lo * tl.sum(n_lo * x_lo, axis=3) + sc_hi * tl.sum(n_hi * x_hi, axis=3))
    return dot - dmin * (m_lo * tl.sum(x_lo, axis=3) + m_hi * tl.sum(x_hi, axis=3))


@triton.jit
def gemv_q4_k(p8, p16, p32, s8, s16, s32, row16, m, km, xr, k0, G: tl.constexpr, nw, rstd, K, eps,
              NORM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr, DUAL: tl.constexpr):
    # G groups = 64-element chunks (4 per 144-byte super-block); unit = one int32 of qs (8 nibbles)
    gc = tl.arange(0, G)[None, :, None]
    w = tl.arange(0, 8)[None, None, :]
    ch = k0 // 64 + gc  # chunk index along the row
    c = ch % 4
    blk16 = row16 + (ch // 4) * 72
    d, dmin, sc_lo, m_lo, sc_hi, m_hi, q = _w_q4_k(p8, p16, p32, blk16, c, w, m)
    d2, dmin2, sc_lo2, m_lo2, sc_hi2, m_hi2, q2 = d, dmin, sc_lo, m_lo, sc_hi, m_hi, q
    if DUAL:
        d2, dmin2, sc_lo2, m_lo2, sc_hi2, m_hi2, q2 = _w_q4_k(s8, s16, s32, blk16, c, w, m)
    rstd = _sync(xr, K, eps, rstd, WAIT, PDL, NORM)
    i = tl.arange(0, 4)[None, None, None, :]
    kx = (k0 + gc * 64 + w * 4)[:, :, :, None] + i
    x_lo = _ldx(xr, nw, kx, km[:, :, :, None], rstd, NORM)  # [1, G, 8, 4]
    x_hi = _ldx(xr, nw, kx + 32, km[:, :, :, None], rstd, NORM)
    a = _dot_q4_k(d, dmin, sc_lo, m_lo, sc_hi, m_hi, q, i, x_lo, x_hi)
    b = a
    if DUAL:
        b = _dot_q4_k(d2, dmin2, sc_lo2, m_lo2, sc_hi2, m_hi2, q2, i, x_lo, x_hi)
    return a, b, rstd


@triton.jit
def _w_q6_k(p8, p16, pd, blk16, d16, half, u, s, m):
    """d (fp16 at pd + d16), ql, qh halfwords of unit u, and the int8 scale of each (unit, nibble) as
    float32."""
    d = _f16(pd, d16, m)
    ql = tl.load(p16 + blk16 + half * 32 + u, mask=m, other=0).to(tl.int32)
    qh = tl.load(p16 + blk16 + 64 + half * 16 + u % 16, mask=m, other=0).to(tl.int32)
    sc_idx = half[:, :, :, None] * 8 + s * 4 + u[:, :, :, None] // 8
    sc = tl.load(p8 + blk16[:, :, :, None] * 2 + 192 + sc_idx, mask=m[:, :, :, None], other=0)
    return d, ql, qh, sc.to(tl.int8, bitcast=True).to(tl.float32)


@triton.jit
def _dot_q6_k(d, ql, qh, sc, u, s, i, xv):
    t = 2 * s + (u[:, :, :, None] // 16)
    lo4 = (ql[:, :, :, None] >> (8 * i + 4 * s)) & 0xF
    hi2 = (qh[:, :, :, None] >> (8 * i + 2 * t)) & 3
    q = ((lo4 | (hi2 << 4)) - 32).to(tl.float32)  # [BO, G, 32, 4]
    return d * tl.sum(sc * q * xv, axis=3)


@triton.jit
def gemv_q6_k(p8, p16, p32, s8, s16, s32, row16, m, km, xr, k0, G: tl.constexpr, nw, rstd, K, eps,
              NORM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr, DUAL: tl.constexpr,
              Q6S: tl.constexpr = False):
    # G groups = 128-element halves (2 per 210-byte super-block); unit u = one halfword of ql,
    # holding elements (s, i): half*128 + s*64 + 2u + i, s = nibble, i = byte within the halfword.
    # Q6S (layout.split_q6_k): block (r, b) = row16 // 105 + b at halfword * 104, its d at p32[block]
    # (p32 / s32: the d's as int16); the same loads otherwise, so the same values bit for bit
    gh = tl.arange(0, G)[None, :, None]
    u = tl.arange(0, 32)[None, None, :]
    hh = k0 // 128 + gh  # half-block index along the row
    half = hh % 2
    if Q6S:
        blk = row16 // 105 + hh // 2  # row16 = r * nb * 105
        blk16, pd, sd, d16 = blk * 104, p32, s32, blk
    else:
        blk16 = row16 + (hh // 2) * 105
        pd, sd, d16 = p16, s16, blk16 + 104
    si = tl.arange(0, 4)[None, None, None, :]
    s = si // 2
    i = si % 2
    d, ql, qh, sc = _w_q6_k(p8, p16, pd, blk16, d16, half, u, s, m)
    d2, ql2, qh2, sc2 = d, ql, qh, sc
    if DUAL:
        d2, ql2, qh2, sc2 = _w_q6_k(s8, s16, sd, blk16, d16, half, u, s, m)
    rstd = _sync(xr, K, eps, rstd, WAIT, PDL, NORM)
    kx = k0 + gh[:, :, :, None] * 128 + s * 64 + 2 * u[:, :, :, None] + i
    xv = _ldx(xr, nw, kx, km[:, :, :, None], rstd, NORM)
    a = _dot_q6_k(d, ql, qh, sc, u, s, i, xv)
    b = a
    if DUAL:
        b = _dot_q6_k(d2, ql2, qh2, sc2, u, s, i, xv)
    return a, b, rstd


@triton.jit
def gemv_tile(p8, p16, p32, row16, m, km, xr, k0, QT: tl.constexpr, G: tl.constexpr, nw, rstd, K, eps,
              NORM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr,
              s8=None, s16=None, s32=None, DUAL: tl.constexpr = False, Q6S: tl.constexpr = False):
    if QT == 8:
        a, b, r = gemv_q8_0(p16, s16, row16, m, km, xr, k0, G, nw, rstd, K, eps, NORM, WAIT, PDL, DUAL)
    elif QT == 6:
        a, b, r = gemv_q5_0(p16, s16, row16, m, km, xr, k0, G, nw, rstd, K, eps, NORM, WAIT, PDL, DUAL)
    elif QT == 12:
        a, b, r = gemv_q4_k(p8, p16, p32, s8, s16, s32, row16, m, km, xr, k0, G, nw, rstd, K, eps, NORM, WAIT,
                            PDL, DUAL)
    else:
        a, b, r = gemv_q6_k(p8, p16, p32, s8, s16, s32, row16, m, km, xr, k0, G, nw, rstd, K, eps, NORM,
                            WAIT, PDL, DUAL, Q6S)
    return a, b, r
