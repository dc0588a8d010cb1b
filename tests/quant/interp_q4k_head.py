"""Run under TRITON_INTERPRET=1 (by test_q4k_head.py): the int8 GEMVs' Q4_K reads (q4k_head.py: each block's
head as int32 words) against the reads they replaced (gemv_tiles._w_q4_k: the head as halfwords and
bytes, decoded before the dots), bit for bit. REF_PASS below is gemv_int8._q4k_pass as it was with those
loads (less the PDL wait: PDL is 0 here), x read once for all rows as then (the SwiGLU now reads it per
row); the interpreter looks _q4k_pass up in gemv_int8's globals at each call, so swapping it there runs
every kernel (gemv_i8, gemv3_i8, glu_q4k_i8) on the old reads.
Prints `name differing_values`. --wrong-chunk: the new reads decode chunk c ^ 1's scales (a broken
decode, and a check that the swap to REF_PASS took: every line must then differ). --rows N: M = 1..N only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks  # noqa: E402

from orcd.quant.kernels import gemv_int8, q4k_head  # noqa: E402
from orcd.quant.kernels.gemv3_int8 import gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8  # noqa: E402
from orcd.quant.kernels.gemv_tiles import _w_q4_k  # noqa: E402
from orcd.quant.kernels.q4k_head import q4k_scales, q4k_words  # noqa: E402
from orcd.quant.kernels.xquant import dp4a, quantize_x  # noqa: E402


@triton.jit
def _ref_dot(wt, xt, ASM: tl.constexpr):
    d, dmin, sc_lo, m_lo, sc_hi, m_hi, q = wt
    xlo, xhi, dlo, slo, dhi, shi = xt
    ilo = tl.sum(dp4a(q & 0x0F0F0F0F, xlo, ASM), axis=3, keep_dims=True).to(tl.float32)
    ihi = tl.sum(dp4a((q >> 4) & 0x0F0F0F0F, xhi, ASM), axis=3, keep_dims=True).to(tl.float32)
    return d * (sc_lo * dlo * ilo + sc_hi * dhi * ihi) - dmin * (m_lo * slo + m_hi * shi)


@triton.jit
def REF_PASS(p32, row16, rmask, xq, xs, tm, k0, K, G: tl.constexpr, ASM: tl.constexpr, WAIT: tl.constexpr,
             PDL: tl.constexpr, s32=None, DUAL: tl.constexpr = False):
    gc = tl.arange(0, G)[None, None, :, None]
    ch = k0 // 64 + gc
    km = ch * 64 < K
    blk16 = row16 + (ch // 4) * 72
    w = tl.arange(0, 8)[None, None, None, :]
    p8, p16 = p32.to(tl.pointer_type(tl.uint8)), p32.to(tl.pointer_type(tl.int16))
    wa = _w_q4_k(p8, p16, p32, blk16, ch % 4, w, rmask & km)
    wb = wa
    if DUAL:
        s8, s16 = s32.to(tl.pointer_type(tl.uint8)), s32.to(tl.pointer_type(tl.int16))
        wb = _w_q4_k(s8, s16, s32, blk16, ch % 4, w, rmask & km)
    xm = km & tm
    xlo = tl.load(xq + ch * 16 + w, mask=xm, other=0)
    xhi = tl.load(xq + ch * 16 + 8 + w, mask=xm, other=0)
    s = xs + ch * 8
    xt = (xlo, xhi, tl.load(s, mask=xm, other=0.0), tl.load(s + 1, mask=xm, other=0.0)
          + tl.load(s + 2, mask=xm, other=0.0), tl.load(s + 4, mask=xm, other=0.0),
          tl.load(s + 5, mask=xm, other=0.0) + tl.load(s + 6, mask=xm, other=0.0))
    a = _ref_dot(wa, xt, ASM)
    b = a
    if DUAL:
        b = _ref_dot(wb, xt, ASM)
    return a, b


@triton.jit
def _wrong_chunk(w0, w1, w2, w3, c):
    return q4k_head.q4k_scales(w0, w1, w2, w3, c ^ 1)


@triton.jit
def _heads_kernel(p32, new_ptr, old_ptr, NB: tl.constexpr):
    """Blocks 0..NB-1 of one row, chunks 0..3: (d, dmin, sc_lo, m_lo, sc_hi, m_hi) both ways -> [NB, 4, 6]."""
    blk = tl.arange(0, NB)[None, :, None, None]
    c = tl.arange(0, 4)[None, None, :, None]
    blk16, w, m = blk * 72 + c * 0, tl.arange(0, 8)[None, None, None, :], (blk < NB) & (c < 4)
    w0, w1, w2, w3, _ = q4k_words(p32, blk16, c, w, m)
    new = q4k_scales(w0, w1, w2, w3, c)
    old = _w_q4_k(p32.to(tl.pointer_type(tl.uint8)), p32.to(tl.pointer_type(tl.int16)), p32, blk16, c, w, m)
    out = (blk * 4 + c) * 6
    for i in tl.static_range(6):
        tl.store(new_ptr + out + i, new[i])
        tl.store(old_ptr + out + i, old[i])


def bits_differ(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements whose bits differ (NaN == NaN when the bits match)."""
    return int((a.contiguous().view(torch.int32 if a.element_size() == 4 else torch.int16)
                != b.contiguous().view(torch.int32 if b.element_size() == 4 else torch.int16)).sum())


def head_cases():
    """Every byte value in each head position: 64 blocks of uniform random bytes (fp16 NaN/inf/subnormal
    d's included), each chunk; and the nibble words q equal as read."""
    raw = torch.from_numpy(np.random.default_rng(7).integers(0, 256, (64 * 144,), dtype=np.uint8))
    new, old = torch.zeros(64, 4, 6), torch.ones(64, 4, 6)
    _heads_kernel[(1,)](raw.view(torch.int32), new, old, NB=64)
    yield "head_values", bits_differ(new, old)


def both(fn, *args, **kwargs):
    """fn(*args, **kwargs) with q4k_head.py's reads, then with REF_PASS's (the previous code's): (new, old).
    Tensor arguments are cloned for each call (a residual is added into in place)."""
    def call():
        return fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)

    new = call()
    cur = gemv_int8._q4k_pass
    gemv_int8._q4k_pass = REF_PASS
    try:
        old = call()
    finally:
        gemv_int8._q4k_pass = cur
    return new, old


def kernel_cases(max_rows: int = 8):
    """gemv_i8 (13 x 768: 12 chunks, G 16 so a partial pass; bias, residual; out not a multiple of BO) at
    M = 1..8 (NT 1, 2, 4, 8 and last programs with fewer tokens); glu_q4k_i8 (32 x 512) at M = 1, 2, 3, 5,
    8 and at BO 32 (the quantized epilogue) at M = 3; gemv3_i8 (Q4_K q 12, k 4; Q6_K v 4) at M = 2, 8."""
    raw = random_blocks(T.Q4_K, 13, 768, 21)
    g, u = random_blocks(T.Q4_K, 32, 512, 22), random_blocks(T.Q4_K, 32, 512, 23)
    shapes = ((T.Q4_K, 12), (T.Q4_K, 4), (T.Q6_K, 4))  # (type, out) of q, k, v
    ws = [(random_blocks(t, o, 512, 30 + j), o, t, None) for j, (t, o) in enumerate(shapes)]
    for m in range(1, max_rows + 1):
        torch.manual_seed(m)
        xq, xs = quantize_x(torch.randn(m, 768))
        bias, res = torch.randn(13), torch.randn(m, 13)
        new, old = both(gemv_i8, xq, xs, raw, 13, 768, T.Q4_K, bias, res, torch.float32)
        yield f"gemv_i8_m{m}", bits_differ(new, old)
        xq, xs = quantize_x(torch.randn(m, 512))
        launches = {1: [None], 2: [None], 3: [None, (2, 32, 4)], 5: [None], 8: [None]}.get(m, [])
        for launch in launches:
            new, old = both(glu_q4k_i8, xq, xs, g, u, 32, 512, torch.float32, launch=launch)
            yield f"glu_q4k_i8{'_bo32' if launch else ''}_m{m}", sum(map(bits_differ, new, old))
        if m in (2, 8):
            new, old = both(gemv3_i8, xq, xs, ws, 512, torch.float32)
            yield f"gemv3_i8_m{m}", sum(map(bits_differ, new, old))


if __name__ == "__main__":
    if "--wrong-chunk" in sys.argv:
        gemv_int8.q4k_scales = q4k_scales = _wrong_chunk
    rows = int(sys.argv[sys.argv.index("--rows") + 1]) if "--rows" in sys.argv else 8
    for name, n in (*head_cases(), *kernel_cases(rows)):
        print(name, n, flush=True)
