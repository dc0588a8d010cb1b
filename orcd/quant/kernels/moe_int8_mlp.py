"""gpt-oss's expert MLP in a decode step with int8 activations (moe_mlp_i8), and its gate/up GEMV for batches
of 2-8 tokens with one program per (expert, BN rows).

moe_mxfp4_int8's kernel runs one program per (pair, BN rows): where several of a batch's pairs route to one
expert (8 tokens x top-4 over 32 experts: 32 pairs, ~21 distinct experts), each of their programs reads and
decodes that expert's rows again, and at 8 tokens the kernel is bound by those instructions, not by memory
(bench/results/gpt_oss_s28/). Here a program reads and decodes expert e's BN rows once per K step (the E2M1
table, the E8M0 scale) and dots them with the x of every pair routed to e. A token routes to an expert at
most once, so at most T pairs per expert: MAXM >= T accumulator rows. Programs of unrouted experts do
nothing. Per block the same exact int32 dp4a sum and the same fp32 scale product as moe_gemv_i8; the row
sums are reduced per K step of KB blocks (there: over KB at the end), so the two agree to fp32 rounding.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.moe_gemv import Split, _e8m0_scale
from orcd.quant.kernels.moe_mxfp4_int8 import _e2m1x2, _words, moe_gemv_i8
from orcd.quant.kernels.xquant import asm_ok, dp4a, quantize_x

# (BN weight rows, KB blocks per K step, num_warps): not yet swept on a GPU (moe_mxfp4_int8's gate/up)
GROUPED_LAUNCH = (4, 16, 1)
GROUPED_TOKENS = (2, 8)  # the batches moe_mlp_i8 sends here (1 token: one pair per expert, nothing shared)


@triton.jit
def _decode_blocks(s_ptr, q_ptr, rows, nmask, blk, bmask, n_blocks, ASM: tl.constexpr):
    """rows [BN] int64 (expert * N + n), blk [KB] -> (lo, hi) [BN, KB, 4] int32 words of 2 * E2M1 int8s
    (the blocks' first and second 16 inputs), scale [BN, KB] fp32 (E8M0 half scale / 2 ** 15)."""
    w = tl.arange(0, 4)
    m2 = nmask[:, None] & bmask[None, :]
    qp = q_ptr + (rows[:, None, None] * n_blocks + blk[None, :, None]) * 4 + w[None, None, :]
    q = tl.load(qp, mask=m2[:, :, None], other=0)
    s = tl.load(s_ptr + rows[:, None] * n_blocks + blk[None, :], mask=m2, other=0)
    lo, hi = _e2m1x2(q, ASM)
    return lo, hi, _e8m0_scale(s) * (1.0 / 32768.0)


@triton.jit
def _dots(lo, hi, scale, xlo, xhi, dx, ASM: tl.constexpr):
    """[BN] fp32: sum over the step's blocks of W[row, block] . x[block] (xlo / xhi [KB, 4], dx [KB])."""
    isum = tl.sum(dp4a(lo, xlo[None, :, :], ASM) + dp4a(hi, xhi[None, :, :], ASM), axis=2)
    return tl.sum(isum.to(tl.float32) * (dx[None, :] * scale), axis=1)


@triton.jit
def _pair(match, rank, pr, j):
    """The index of the j-th pair (in pair order) routed to this program's expert."""
    return tl.sum(tl.where(match & (rank == j), pr, 0), axis=0)


@triton.jit
def _glu_grouped_kernel(xq_ptr, xs_ptr, ids_ptr, sg_ptr, qg_ptr, su_ptr, qu_ptr, bg_ptr, bu_ptr, out_ptr, P,
                        N, K, alpha, limit, A_DIV: tl.constexpr, PP: tl.constexpr, MAXM: tl.constexpr,
                        HAS_BIAS: tl.constexpr, BN: tl.constexpr, KB: tl.constexpr, ASM: tl.constexpr):
    e = tl.program_id(0)  # the expert
    pr = tl.arange(0, PP)
    match = tl.load(ids_ptr + pr, mask=pr < P, other=-1) == e  # [PP] pairs routed to e
    hits = match.to(tl.int32)
    cnt = tl.sum(hits, axis=0)
    if cnt > 0:
        rank = tl.cumsum(hits, axis=0) - 1  # a routed pair's place among them
        n = tl.program_id(1) * BN + tl.arange(0, BN)
        nmask = n < N
        rows = e.to(tl.int64) * N + n
        slot = tl.arange(0, MAXM)[:, None]
        n_blocks = K // 32
        w = tl.arange(0, 4)
        acc_g = tl.zeros([MAXM, BN], dtype=tl.float32)  # row j: the j-th routed pair
        acc_u = tl.zeros([MAXM, BN], dtype=tl.float32)
        for blk0 in range(0, n_blocks, KB):
            blk = blk0 + tl.arange(0, KB)
            bmask = blk < n_blocks
            g_lo, g_hi, g_sc = _decode_blocks(sg_ptr, qg_ptr, rows, nmask, blk, bmask, n_blocks, ASM)
            u_lo, u_hi, u_sc = _decode_blocks(su_ptr, qu_ptr, rows, nmask, blk, bmask, n_blocks, ASM)
            for j in tl.static_range(MAXM):
                if j < cnt:
                    xr = (_pair(match, rank, pr, j) // A_DIV).to(tl.int64)  # the pair's token
                    xw = xq_ptr + xr * (K // 4) + blk[:, None] * 8 + w[None, :]
                    xlo = tl.load(xw, mask=bmask[:, None], other=0)
                    xhi = tl.load(xw + 4, mask=bmask[:, None], other=0)
                    dx = tl.load(xs_ptr + (xr * n_blocks + blk) * 4, mask=bmask, other=0.0)
                    g = _dots(g_lo, g_hi, g_sc, xlo, xhi, dx, ASM)
                    u = _dots(u_lo, u_hi, u_sc, xlo, xhi, dx, ASM)
                    acc_g = tl.where(slot == j, acc_g + g[None, :], acc_g)
                    acc_u = tl.where(slot == j, acc_u + u[None, :], acc_u)
        _glu_store(acc_g, acc_u, match, rank, pr, slot, cnt, e, n, nmask, bg_ptr, bu_ptr, out_ptr, N, alpha,
                   limit, MAXM, HAS_BIAS)


@triton.jit
def _glu_store(acc_g, acc_u, match, rank, pr, slot, cnt, e, n, nmask, bg_ptr, bu_ptr, out_ptr, N, alpha,
               limit, MAXM: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Each routed pair's row: biases, clamped SwiGLU (moe_gemv._epilogue's, op for op), store."""
    if HAS_BIAS:
        b_g = tl.load(bg_ptr + e.to(tl.int64) * N + n, mask=nmask, other=0.0).to(tl.float32)
        b_u = tl.load(bu_ptr + e.to(tl.int64) * N + n, mask=nmask, other=0.0).to(tl.float32)
    for j in tl.static_range(MAXM):
        if j < cnt:
            y = tl.sum(tl.where(slot == j, acc_g, 0.0), axis=0)  # [BN]
            u = tl.sum(tl.where(slot == j, acc_u, 0.0), axis=0)
            if HAS_BIAS:
                y += b_g
                u += b_u
            g = tl.minimum(y, limit)
            u = tl.minimum(tl.maximum(u, -limit), limit)
            y = g * tl.sigmoid(g * alpha) * (u + 1)
            p = _pair(match, rank, pr, j).to(tl.int64)
            tl.store(out_ptr + p * N + n, y.to(out_ptr.dtype.element_ty), mask=nmask)


def moe_glu_i8_grouped(xq: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, w_gate: Split, w_up: Split,
                       b_gate: torch.Tensor | None, b_up: torch.Tensor | None, top_k: int,
                       out_dtype: torch.dtype = torch.bfloat16, alpha: float = 1.702, limit: float = 7.0,
                       launch: tuple[int, int, int] | None = None) -> torch.Tensor:
    """moe_gemv_i8's gate/up projection (w_up given, slots 1), one program per (expert, BN rows): xq =
    quantize_x(x) of x [T, K]; ids [T * top_k] int, a token's experts distinct; w_* split MXFP4 of [E, N, K]
    -> [P, N] clamped SwiGLU per pair, in out_dtype."""
    words, scales = xq
    t, p = words.shape[0], ids.numel()
    if p != t * top_k:
        raise ValueError(f"ids must hold top_k = {top_k} experts for each of the {t} tokens, got {p}")
    n_exp, n_out = w_gate[0].shape[0], w_gate[0].shape[1]
    out = torch.empty((p, n_out), dtype=out_dtype, device=words.device)
    bn, kb, warps = launch or GROUPED_LAUNCH
    dummy = w_gate[0]
    _glu_grouped_kernel[(n_exp, triton.cdiv(n_out, bn))](
        words, scales, ids, *_words(w_gate), *_words(w_up), b_gate if b_gate is not None else dummy,
        b_up if b_up is not None else dummy, out, p, n_out, words.shape[1] * 4, alpha, limit, A_DIV=top_k,
        PP=triton.next_power_of_2(p), MAXM=triton.next_power_of_2(t), HAS_BIAS=b_gate is not None, BN=bn,
        KB=kb, ASM=asm_ok(words.device), num_warps=warps)
    return out


def moe_mlp_i8(h: torch.Tensor, ids: torch.Tensor, gate: Split, up: Split, down: Split, biases: tuple,
               route_w: torch.Tensor, top_k: int, residual: torch.Tensor, hq: tuple | None = None,
               fuse_quant: bool = False, grouped: bool | None = None) -> torch.Tensor:
    """The expert MLP of a decode step, int8 activations: residual [T, H] += sum over each token's k
    experts of route_w * (down(clamped SwiGLU(gate h, up h)) + b_down). h [T, H]; ids, route_w [T * k];
    biases (b_gate, b_up, b_down) [E, *] or None each. 4 launches: quantize h, gate/up, quantize, down;
    hq = quantize_x(h) given (norm_route(quant=True)): 3; fuse_quant (F % 32 == 0): the SwiGLU output
    quantized in the gate/up epilogue, one fewer. grouped: the gate/up GEMV one program per expert
    (moe_glu_i8_grouped; default: batches of GROUPED_TOKENS, not with fuse_quant)."""
    bg, bu, bd = biases
    xq = hq if hq is not None else quantize_x(h)
    lo, hi = GROUPED_TOKENS
    if grouped is None:
        grouped = lo <= h.shape[0] <= hi and not fuse_quant
    if grouped:
        aq = quantize_x(moe_glu_i8_grouped(xq, ids, gate, up, bg, bu, top_k, out_dtype=h.dtype))  # [P, F]
    elif fuse_quant and gate[0].shape[1] % 32 == 0:
        aq = moe_gemv_i8(xq, ids, gate, up, bg, bu, None, top_k, out_dtype=h.dtype, quant_out=True)
    else:
        aq = quantize_x(moe_gemv_i8(xq, ids, gate, up, bg, bu, None, top_k, out_dtype=h.dtype))  # [P, F]
    return moe_gemv_i8(aq, ids, down, None, bd, None, route_w, top_k, slots=top_k, residual=residual)
