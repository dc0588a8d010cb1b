"""MXFP4 MoE GEMV for decode at small batch (gpt-oss): one program per (output row, tile of BN weight
rows); only the routed experts' blocks are read, decoded in registers with bit operations.

Layout (orcd/quant/mxfp4.py split_blocks_): scales uint8 [E, N, K / 32] (E8M0 exponents), codes uint8
[E, N, K / 2]; block b's 16 code bytes hold element b * 32 + j in the low nibble of byte j and
b * 32 + 16 + j in the high one. A K step reads a [BN, KB, 16] tile of code bytes (16-byte vector loads)
and the [BN, KB] exponents; per (row, block) the 32 products are summed in fp32, then scaled once.

E2M1 decode, exact (`_e2m1_lo` / `_e2m1_hi`): the code's 3 magnitude bits e1 e0 m are placed on fp16's
two low exponent bits and its top mantissa bit, the sign on fp16's sign bit, so the fp16 number is the
E2M1 value times 2 ** -14 (exponent 0 is fp16's subnormal: m * 2 ** -15 = 0.5 * m * 2 ** -14). The
scale returned by `_e8m0_scale` carries the 2 ** 14 back: W = fp16 * 2 ** (e - 113).

Output rows: SLOTS = 1, one row per (token, expert) pair ("pair" p = token * top_k + slot); SLOTS = top_k
(down projection), one row per token, the k slots' routed-weighted outputs summed in the program (no
[P, N] intermediate, no separate sum, and a token's result never depends on other tokens); with a
residual given, the down kernel adds its rows into it in place (the fused decode step's residual add).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

Split = tuple[torch.Tensor, torch.Tensor]  # (scales [E, N, K / 32], codes [E, N, K / 2]) uint8
# (BN, KB, num_warps): the best of the H100 sweep for gate+up and down at 1 and 4 tokens, within 10 % of
# the best at 2 and 8 (bench/kernels/moe_mxfp4_times.py, bench/results/moe_mxfp4_gemv.json)
GEMV_LAUNCH = (8, 16, 4)


@triton.jit
def _e2m1_lo(q):
    """uint8 codes -> fp16 of the low nibbles' E2M1 values * 2 ** -14 (see the module docstring)."""
    t = q.to(tl.uint16)
    return (((t & 7) << 9) | ((t & 8) << 12)).to(tl.float16, bitcast=True)


@triton.jit
def _e2m1_hi(q):
    """uint8 codes -> fp16 of the high nibbles' E2M1 values * 2 ** -14."""
    t = q.to(tl.uint16)
    return (((t & 0x70) << 5) | ((t & 0x80) << 8)).to(tl.float16, bitcast=True)


@triton.jit
def _e8m0_scale(e):
    """uint8 E8M0 exponents -> float32 2 ** (e - 127) * 2 ** 14: ggml's half scale 2 ** (e - 128)
    (e < 2: float32 subnormal, as ggml_e8m0_to_fp32_half) times 2 ** 15, both exact."""
    e = e.to(tl.int32)
    bits = tl.where(e < 2, 0x00200000 << e, (e - 1) << 23)
    return bits.to(tl.float32, bitcast=True) * 32768.0


@triton.jit
def _block_dots(s_ptr, q_ptr, rows, nmask, blk, bmask, n_blocks, x_lo, x_hi):
    """rows [BN] int64 (expert * N + n), blk [KB] block indices, x_lo / x_hi [KB, 16] fp32 (the first and
    second 16 elements of each block) -> [BN, KB] fp32: W[row, block] . x[block], scaled."""
    j = tl.arange(0, 16)
    m2 = nmask[:, None] & bmask[None, :]
    qp = q_ptr + (rows[:, None, None] * n_blocks + blk[None, :, None]) * 16 + j[None, None, :]
    q = tl.load(qp, mask=m2[:, :, None], other=0)
    s = tl.load(s_ptr + rows[:, None] * n_blocks + blk[None, :], mask=m2, other=0)
    d = tl.sum(_e2m1_lo(q).to(tl.float32) * x_lo[None, :, :] + _e2m1_hi(q).to(tl.float32) * x_hi[None, :, :],
               axis=2)
    return d * _e8m0_scale(s)


@triton.jit
def _moe_gemv_kernel(x_ptr, ids_ptr, sg_ptr, qg_ptr, su_ptr, qu_ptr, bg_ptr, bu_ptr, rw_ptr, out_ptr, N, K,
                     alpha, limit, A_DIV: tl.constexpr, SLOTS: tl.constexpr, GLU: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HAS_RW: tl.constexpr, BN: tl.constexpr, KB: tl.constexpr,
                     RES: tl.constexpr = False):
    r = tl.program_id(0)  # output row: a pair (SLOTS 1) or a token (SLOTS top_k)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < N
    b = tl.arange(0, KB)
    j = tl.arange(0, 16)
    n_blocks = K // 32
    acc_g = tl.zeros([BN, KB], dtype=tl.float32)
    acc_u = tl.zeros([BN, KB], dtype=tl.float32)
    for blk0 in range(0, n_blocks, KB):
        blk = blk0 + b
        bmask = blk < n_blocks
        xcol = blk[:, None] * 32 + j[None, :]  # [KB, 16]
        for s in tl.static_range(SLOTS):
            p = r * SLOTS + s
            rows = tl.load(ids_ptr + p).to(tl.int64) * N + n
            xrow = x_ptr + (p // A_DIV).to(tl.int64) * K
            x_lo = tl.load(xrow + xcol, mask=bmask[:, None], other=0.0).to(tl.float32)
            x_hi = tl.load(xrow + xcol + 16, mask=bmask[:, None], other=0.0).to(tl.float32)
            d = _block_dots(sg_ptr, qg_ptr, rows, nmask, blk, bmask, n_blocks, x_lo, x_hi)
            if HAS_RW:
                d = d * tl.load(rw_ptr + p).to(tl.float32)
            acc_g += d
            if GLU:
                acc_u += _block_dots(su_ptr, qu_ptr, rows, nmask, blk, bmask, n_blocks, x_lo, x_hi)
    _epilogue(acc_g, acc_u, r, n, nmask, ids_ptr, bg_ptr, bu_ptr, rw_ptr, out_ptr, N, alpha, limit, SLOTS,
              GLU, HAS_BIAS, HAS_RW, RES)


@triton.jit
def _epilogue(acc_g, acc_u, r, n, nmask, ids_ptr, bg_ptr, bu_ptr, rw_ptr, out_ptr, N, alpha, limit,
              SLOTS: tl.constexpr, GLU: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RW: tl.constexpr,
              RES: tl.constexpr):
    """The epilogue of both MoE GEMVs (float x here, int8 x in moe_mxfp4_int8): biases
    (routed-weighted), clamped SwiGLU (GLU), residual add, store row r."""
    y = tl.sum(acc_g, axis=1)  # [BN]
    if HAS_BIAS:
        for s in tl.static_range(SLOTS):
            p = r * SLOTS + s
            e = tl.load(ids_ptr + p).to(tl.int64)
            bias = tl.load(bg_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)
            if HAS_RW:
                bias = bias * tl.load(rw_ptr + p).to(tl.float32)
            y += bias
    if GLU:  # SLOTS is 1: r is the pair
        u = tl.sum(acc_u, axis=1)
        if HAS_BIAS:
            e = tl.load(ids_ptr + r).to(tl.int64)
            u += tl.load(bu_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)
        g = tl.minimum(y, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        y = g * tl.sigmoid(g * alpha) * (u + 1)
    if RES:  # out is the residual stream: out[r] += y, rounded once
        y += tl.load(out_ptr + r.to(tl.int64) * N + n, mask=nmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + r.to(tl.int64) * N + n, y.to(out_ptr.dtype.element_ty), mask=nmask)


def moe_gemv(x: torch.Tensor, ids: torch.Tensor, w_gate: Split, w_up: Split | None,
             b_gate: torch.Tensor | None, b_up: torch.Tensor | None, route_w: torch.Tensor | None,
             top_k: int, slots: int = 1, alpha: float = 1.702, limit: float = 7.0,
             launch: tuple[int, int, int] | None = None,
             residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, K] (GLU: per token, read by pair // top_k) or [P, K] (down: per pair); ids [P] expert per
    pair; w_* split MXFP4 of [E, N, K]; b_* [E, N] or None; route_w [P] or None (down only). GLU (w_up
    given, slots 1) -> [P, N] clamped SwiGLU; else slots 1 -> [P, N] (acc + b) * route_w per pair, or
    slots top_k -> [P / top_k, N] the sum over each token's k pairs. Output in x.dtype; with residual
    [P / slots, N] (not GLU), the output is added into it in place and it is returned."""
    glu = w_up is not None
    if glu and slots != 1:
        raise ValueError("the GLU projection writes one row per pair (slots 1)")
    n_out, k = w_gate[0].shape[1], x.shape[1]
    p = ids.numel()
    x = x.contiguous()
    if residual is not None and (glu or tuple(residual.shape) != (p // slots, n_out)):
        raise ValueError(f"residual must be [{p // slots}, {n_out}] and the projection not the GLU one")
    out = residual if residual is not None else torch.empty((p // slots, n_out), dtype=x.dtype,
                                                            device=x.device)
    dummy = w_gate[0]  # never read when the matching constexpr is off
    bn, kb, warps = launch or GEMV_LAUNCH
    _moe_gemv_kernel[(p // slots, triton.cdiv(n_out, bn))](
        x, ids, *w_gate, *(w_up if glu else (dummy, dummy)), b_gate if b_gate is not None else dummy,
        b_up if b_up is not None else dummy, route_w if route_w is not None else dummy, out, n_out, k,
        alpha, limit, A_DIV=top_k if glu else 1, SLOTS=slots, GLU=glu, HAS_BIAS=b_gate is not None,
        HAS_RW=route_w is not None, BN=bn, KB=kb, RES=residual is not None, num_warps=warps)
    return out
