"""Decode GEMVs for Q8_0 and Q5_0 weights with int8 activations, on GGUF's own blocks.

Qwen2.5-72B's ffn_down rows (29,568 = 115.5 x 256 inputs) cannot be K-quants: llama.cpp's Q4_K_M writes
them as Q5_0 (40 layers) or Q8_0 (40 layers), 16.9 GB of the 45.2 GB one token reads. The float GEMV ran
them at 0.98 TB/s (Q5_0) and 2.02 TB/s (Q8_0) on an H200 (bench/kernels/m1_72b.py).

x comes quantized per 32 inputs (xquant.quantize_x; the int8 SwiGLU kernel writes it for the down). Both
block types cover 32 inputs and are only 2-byte aligned (34 and 22 bytes), so each int32 word is read as
two halfwords (gemv_int8._word).
- Q8_0 (d fp16, then 32 int8): d * dx * (dp4a sum of the 8 weight words with x's 8 words).
- Q5_0 (d fp16, qh 32 bits, qs 16 bytes): element j < 16 is (qs[j] & 15) | (bit j of qh) << 4, element
  j + 16 is (qs[j] >> 4) | (bit j + 16 of qh) << 4, each minus 16. Per block d * dx * (dot(v, xq) - 16 *
  sum(xq)), v the unsigned 5-bit values: exactly the Q8_0 sum over x's int8 values. (xs's exact sum(x) for
  the -16 would put x's rounding on the uncentred 0..31 values: 3x the error, measured.)
Only the dot sees x's int8 rounding. Each program takes BO weight rows and NT tokens (x rows): a weight
tile is loaded once and dotted with all NT tokens, G blocks per pass over K.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.fused_linear import launch_opts
from orcd.quant.kernels.gemv_int8 import _epilogue, _word
from orcd.quant.kernels.gemv_tiles import _f16
from orcd.quant.kernels.int8_launch import tokens_per_program
from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.xquant import asm_ok, dp4a

# (G blocks per pass, BO rows per program, warps) by NT tokens per program: the best of a sweep on an H200
# at the 72B's down shapes, K = 29,568 and a TP rank's 14,784 (bench/kernels/m1_72b.py; session 24 in
# docs/performance.md). NT 8, Q5_0: the unfused step's 5..8-row downs (decode_products.LEGACY_ROWS_MAX),
# session 25's sweep at 8 rows (G 16 / BO 8: 47.6 us at a TP 4 rank's 8192 x 7392, G 32 / BO 4 52.7);
# NT 8, Q8_0: not routed (batched_linear is faster at 8 rows).
LEGACY_I8_LAUNCH = MappingProxyType({
    1: MappingProxyType({Q.Q8_0: (64, 2, 4), Q.Q5_0: (64, 1, 2)}),
    2: MappingProxyType({Q.Q8_0: (64, 2, 4), Q.Q5_0: (64, 2, 4)}),
    4: MappingProxyType({Q.Q8_0: (16, 8, 4), Q.Q5_0: (32, 4, 4)}),
    8: MappingProxyType({Q.Q8_0: (16, 8, 4), Q.Q5_0: (16, 8, 4)}),
})
TYPES = (Q.Q8_0, Q.Q5_0)  # blocks of 17 and 11 halfwords (the kernel's * 17 and * 11)


@triton.jit
def _q8_0_pass(p16, row16, rmask, xq, xs, tm, b0, NB, G: tl.constexpr, ASM: tl.constexpr,
               WAIT: tl.constexpr, PDL: tl.constexpr):
    """G blocks from block b0: partial sums [NT, BO, G, 1]; row16, rmask [1, BO, 1, 1] (row16: the row's
    first halfword); xq, xs, tm: each token's x rows and mask [NT, 1, 1, 1]."""
    blk = b0 + tl.arange(0, G)[None, None, :, None]
    w = tl.arange(0, 8)[None, None, None, :]  # word w: inputs 4w .. 4w + 3 of the block
    km = blk < NB
    m = rmask & km
    base = row16 + blk * 17
    words = _word(p16, base + 1 + 2 * w, m)  # [1, BO, G, 8]
    d = _f16(p16, base, m)  # [1, BO, G, 1]
    if WAIT and PDL:  # weights requested; x is the previous kernel's output
        tl.extra.cuda.gdc_wait()
        if PDL == 3:
            tl.extra.cuda.gdc_launch_dependents()
    xm = km & tm
    xw = tl.load(xq + blk * 8 + w, mask=xm, other=0)  # [NT, 1, G, 8]
    dx = tl.load(xs + blk * 4, mask=xm, other=0.0)  # [NT, 1, G, 1]
    dot = tl.sum(dp4a(words, xw, ASM), axis=3, keep_dims=True).to(tl.float32)
    return d * dx * dot


@triton.jit
def _q5_0_pass(p16, row16, rmask, xq, xs, tm, b0, NB, G: tl.constexpr, ASM: tl.constexpr,
               WAIT: tl.constexpr, PDL: tl.constexpr):
    """G blocks from block b0: partial sums [NT, BO, G, 1, 1] (dims: tokens, rows, blocks, 1, 1); row16,
    rmask [1, BO, 1, 1, 1]; xq, xs, tm [NT, 1, 1, 1, 1]. Tiles [.., 2, 4]: half h (elements 16h ..
    16h + 15) and qs word u; x word 4h + u holds elements 16h + 4u .. 16h + 4u + 3."""
    blk = b0 + tl.arange(0, G)[None, None, :, None, None]
    h = tl.arange(0, 2)[None, None, None, :, None]
    u = tl.arange(0, 4)[None, None, None, None, :]
    km = blk < NB
    m = rmask & km
    base = row16 + blk * 11  # halfwords: d, qh (2), qs (8)
    qs = _word(p16, base + 3 + 2 * u, m)  # [1, BO, G, 1, 4]
    qh = _word(p16, base + 1, m)  # [1, BO, G, 1, 1]
    d = _f16(p16, base, m)
    if WAIT and PDL:
        tl.extra.cuda.gdc_wait()
        if PDL == 3:
            tl.extra.cuda.gdc_launch_dependents()
    hb = (qh >> (16 * h + 4 * u)) & 0xF  # the 5th bits of the word's 4 elements
    bit4 = ((hb & 1) << 4) | ((hb & 2) << 11) | ((hb & 4) << 18) | ((hb & 8) << 25)  # 0x10 in those bytes
    v = ((qs >> (4 * h)) & 0x0F0F0F0F) | bit4
    xm = km & tm
    xw = tl.load(xq + blk * 8 + 4 * h + u, mask=xm, other=0)  # [NT, 1, G, 2, 4]
    dx = tl.load(xs + blk * 4, mask=xm, other=0.0)  # [NT, 1, G, 1, 1]
    # the -16 on the sum of x's int8 values (once per program, not per row): v stays unsigned 0..31
    ones = tl.zeros_like(xw) + 0x01010101
    xsum = tl.sum(tl.sum(dp4a(xw, ones, ASM), axis=4, keep_dims=True), axis=3, keep_dims=True)
    dot = tl.sum(tl.sum(dp4a(v, xw, ASM), axis=4, keep_dims=True), axis=3, keep_dims=True)
    return d * dx * (dot - 16 * xsum).to(tl.float32)
    return d * dx * dot


@triton.jit
def _legacy_i8_kernel(xq_ptr, xs_ptr, p16, y_ptr, N, OUT, K, stride_yn, b_ptr, QT: tl.constexpr,
                      G: tl.constexpr, BO: tl.constexpr, NT: tl.constexpr, ASM: tl.constexpr,
                      HAS_BIAS: tl.constexpr, RES: tl.constexpr, PDL: tl.constexpr = 0):
    # program (i, j): y[t, rows] (+)= W[rows] . x[t] for rows [i * BO, (i + 1) * BO), tokens t in
    # [j * NT, (j + 1) * NT) (< N); QT 8 Q8_0, 6 Q5_0
    rows = tl.program_id(0) * BO + tl.arange(0, BO)
    tok = tl.program_id(1) * NT + tl.arange(0, NT)
    nb = K // 32
    if QT == 8:
        t4 = tok[:, None, None, None]
        xq, xs, tm = xq_ptr + t4 * (K // 4), xs_ptr + t4 * (K // 8), t4 < N
        rmask = (rows < OUT)[None, :, None, None]
        row16 = rows.to(tl.int64)[None, :, None, None] * (nb * 17)
        acc = _q8_0_pass(p16, row16, rmask, xq, xs, tm, 0, nb, G, ASM, True, PDL)
        for b0 in range(G, nb, G):
            acc += _q8_0_pass(p16, row16, rmask, xq, xs, tm, b0, nb, G, ASM, False, PDL)
        out = tl.sum(tl.sum(acc, axis=3), axis=2)
    else:
        t5 = tok[:, None, None, None, None]
        xq, xs, tm = xq_ptr + t5 * (K // 4), xs_ptr + t5 * (K // 8), t5 < N
        rmask = (rows < OUT)[None, :, None, None, None]
        row16 = rows.to(tl.int64)[None, :, None, None, None] * (nb * 11)
        acc = _q5_0_pass(p16, row16, rmask, xq, xs, tm, 0, nb, G, ASM, True, PDL)
        for b0 in range(G, nb, G):
            acc += _q5_0_pass(p16, row16, rmask, xq, xs, tm, b0, nb, G, ASM, False, PDL)
        out = tl.sum(tl.sum(tl.sum(acc, axis=4), axis=3), axis=2)
    _epilogue(out, rows, tok, N, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS, RES)


def legacy_launch(qt: int, n: int, in_features: int,
                  launch: tuple | None = None) -> tuple[int, int, int, int]:
    """(G, BO, warps, NT) for N rows: launch (G, BO, warps[, NT]) if given, else the table's; G at most
    the blocks of a row (a power of two)."""
    nt = tokens_per_program(n)
    g, bo, warps, *rest = launch if launch is not None else LEGACY_I8_LAUNCH[nt][qt]
    return min(g, triton.next_power_of_2(in_features // 32)), bo, warps, rest[0] if rest else nt


def gemv_legacy_i8(xq: torch.Tensor, xs: torch.Tensor, raw: torch.Tensor, out_features: int,
                   in_features: int, qtype: int, bias: torch.Tensor | None = None,
                   residual: torch.Tensor | None = None, dtype: torch.dtype = torch.bfloat16,
                   launch: tuple | None = None) -> torch.Tensor:
    """y [N, out] = x @ W.T for x from quantize_x (xq [N, K / 4], xs [N, K / 32, 4]) and W raw Q8_0 (8) or
    Q5_0 (6), uint8 [out, K / 32 * block bytes] as in the file (+ bias [out]). residual [N, out]: the
    product is added into it in place and it is returned. launch: (G, BO, warps[, NT]) instead of the
    table's."""
    qt = int(qtype)
    if qt not in TYPES:
        raise ValueError(f"gemv_legacy_i8 reads Q8_0 (8) and Q5_0 (6), not type {qt}")
    if in_features % 32 or raw.numel() != out_features * row_bytes(qt, in_features):
        raise ValueError(f"raw must be uint8 [{out_features}, {in_features} // 32 blocks] of type {qt}")
    n = xq.shape[0]
    y = residual if residual is not None else torch.empty((n, out_features), dtype=dtype, device=xq.device)
    g, bo, warps, nt = legacy_launch(qt, n, in_features, launch)
    _legacy_i8_kernel[(triton.cdiv(out_features, bo), triton.cdiv(n, nt))](
        xq, xs, raw.reshape(-1).view(torch.int16), y, n, out_features, in_features, y.stride(0), bias, QT=qt,
        G=g, BO=bo, NT=nt, ASM=asm_ok(xq.device), HAS_BIAS=bias is not None, RES=residual is not None,
        num_warps=warps, **launch_opts(xq.device))
    return y
