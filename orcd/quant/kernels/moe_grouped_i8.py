"""MXFP4 MoE GEMV with int8 activations, pairs grouped by expert (gpt-oss decode at 2-8 tokens).

moe_mxfp4_int8.py runs one program per (pair, output tile): at 8 tokens x top 4 = 32 pairs over 32
experts, an expert chosen by several tokens has its tile read (and decoded) once per pair. Here program
(g, tile) leads the group of pair g's expert e: the pairs routed to e, in pair order, TM at a time (lead:
g's rank among e's pairs is a multiple of TM; any other program exits at once). It reads e's weight tile
once per K step, decodes it once (the prmt table of moe_mxfp4_int8) and applies it to every member's int8
x (dp4a), accumulating [TM, BN]. No sort, no host sync, grid fixed by P: the grouping is found in each
program from the P ids (a cumsum over <= 32 values), so the step stays capturable in a CUDA graph.
Expected expert tiles read at 8 tokens (each token's 4 experts distinct, uniform routing): 32 * (1 -
(28/32) ** 8) = 21.0 instead of 32 (-34 % of the MoE weight bytes; 1 token: 4, unchanged).

gate/up (GLU): y = clamped SwiGLU(W_g x + b_g, W_u x + b_u) per pair, rounded to act_dtype, then
quantized per 32 outputs in the epilogue (BN a multiple of 32: the program holds whole blocks), written
as xquant's (words [P, F / 4], scales [P, F / 32, 4]): the down GEMV's input, with no quantize launch.
down: y = (W_d a + b_d) * route_w per pair, fp32 [P, H]; `moe_sum` adds each token's k rows (slot order)
into the residual, rounded once (as moe_gemv's slots = top_k epilogue). Every pair's result is the same
dot products as moe_mxfp4_int8's (summed per K step rather than at the end: fp32 order only).
All three kernels take programmatic dependent launch where fused_linear.launch_opts turns it on (each waits
at its start for the kernel before it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import launch_opts
from orcd.quant.kernels.moe_gemv import Split, _e8m0_scale
from orcd.quant.kernels.moe_mxfp4_int8 import _e2m1x2, _words
from orcd.quant.kernels.xquant import asm_ok, dp4a, store_quant32

# (BN weight rows, KB blocks per step, num_warps) for gate/up (BN a multiple of 32) and down: not tuned on
# a GPU yet (bench/kernels/gpt_oss_fused.py --moe-sweep times others)
GLU_LAUNCH = (32, 8, 4)
DOWN_LAUNCH = (32, 8, 4)


@triton.jit
def _group(ids_ptr, g, P, PP: tl.constexpr, TM: tl.constexpr):
    """Pair g's expert e and its group -> (e int64, lead (g starts a run of TM), members [TM] int32 pair
    indices in pair order, member count)."""
    q = tl.arange(0, PP)
    ids = tl.load(ids_ptr + q, mask=q < P, other=-1)
    e = tl.load(ids_ptr + g)
    match = ids == e
    rank = tl.cumsum(match.to(tl.int32), axis=0) - 1  # [PP]: rank of each of e's pairs among them
    r0 = tl.sum(tl.where(q == g, rank, 0), axis=0)  # g's own rank
    j = tl.arange(0, TM)
    hit = match[None, :] & (rank[None, :] == r0 + j[:, None])  # [TM, PP]
    members = tl.sum(tl.where(hit, q[None, :], 0), axis=1)
    count = tl.sum(tl.sum(hit.to(tl.int32), axis=1), axis=0)
    return e.to(tl.int64), r0 % TM == 0, members, count


@triton.jit
def _w_words(s_ptr, q_ptr, rows, nmask, blk, bmask, n_blocks, ASM: tl.constexpr):
    """rows [BN] int64 (expert * N + n), blk [KB] -> (lo, hi [BN, KB, 4] int32 words of 2 * E2M1 int8s,
    scale [BN, KB] fp32: ggml's half scale 2 ** (e - 128), as moe_mxfp4_int8._block_dots_i8 applies it)."""
    w = tl.arange(0, 4)
    m2 = nmask[:, None] & bmask[None, :]
    qp = q_ptr + (rows[:, None, None] * n_blocks + blk[None, :, None]) * 4 + w[None, None, :]
    q = tl.load(qp, mask=m2[:, :, None], other=0)
    s = tl.load(s_ptr + rows[:, None] * n_blocks + blk[None, :], mask=m2, other=0)
    lo, hi = _e2m1x2(q, ASM)
    return lo, hi, _e8m0_scale(s) * (1.0 / 32768.0)


@triton.jit
def _dot(lo, hi, ws, xlo, xhi, dx, ASM: tl.constexpr):
    """One member's [BN] partial: sum over the step's blocks of (W . x) as moe_mxfp4_int8 computes it."""
    isum = tl.sum(dp4a(lo, xlo[None, :, :], ASM) + dp4a(hi, xhi[None, :, :], ASM), axis=2)  # [BN, KB]
    return tl.sum(isum.to(tl.float32) * (dx[None, :] * ws), axis=1)


@triton.jit
def _grouped_i8_kernel(xq_ptr, xs_ptr, ids_ptr, sg_ptr, qg_ptr, su_ptr, qu_ptr, bg_ptr, bu_ptr, rw_ptr,
                       out_ptr, oq_ptr, os_ptr, P, N, K, alpha, limit, A_DIV: tl.constexpr,
                       GLU: tl.constexpr, HAS_BIAS: tl.constexpr, PP: tl.constexpr, TM: tl.constexpr,
                       BN: tl.constexpr, KB: tl.constexpr, ASM: tl.constexpr, PDL: tl.constexpr = 0):
    if PDL:  # launched early (fused_linear.launch_opts): wait for ids and x, then release the next kernel
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    e, lead, members, count = _group(ids_ptr, tl.program_id(0), P, PP, TM)
    if not lead:
        return
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < N
    rows = e * N + n
    b = tl.arange(0, KB)
    w = tl.arange(0, 4)
    jv = tl.arange(0, TM)
    n_blocks = K // 32
    acc_g = tl.zeros([TM, BN], dtype=tl.float32)
    acc_u = tl.zeros([TM, BN], dtype=tl.float32)
    for blk0 in range(0, n_blocks, KB):
        blk = blk0 + b
        bmask = blk < n_blocks
        lo_g, hi_g, ws_g = _w_words(sg_ptr, qg_ptr, rows, nmask, blk, bmask, n_blocks, ASM)  # once per group
        if GLU:
            lo_u, hi_u, ws_u = _w_words(su_ptr, qu_ptr, rows, nmask, blk, bmask, n_blocks, ASM)
        for j in range(count):  # each member: its x words against the decoded tile
            xr = (tl.sum(tl.where(jv == j, members, 0), axis=0) // A_DIV).to(tl.int64)
            xw = xq_ptr + xr * (K // 4) + blk[:, None] * 8 + w[None, :]
            xlo = tl.load(xw, mask=bmask[:, None], other=0)
            xhi = tl.load(xw + 4, mask=bmask[:, None], other=0)
            dx = tl.load(xs_ptr + (xr * n_blocks + blk) * 4, mask=bmask, other=0.0)
            acc_g = tl.where(jv[:, None] == j, acc_g + _dot(lo_g, hi_g, ws_g, xlo, xhi, dx, ASM)[None, :],
                             acc_g)
            if GLU:
                acc_u = tl.where(jv[:, None] == j,
                                 acc_u + _dot(lo_u, hi_u, ws_u, xlo, xhi, dx, ASM)[None, :], acc_u)
    _grouped_epilogue(acc_g, acc_u, e, members, jv < count, n, nmask, bg_ptr, bu_ptr, rw_ptr, out_ptr, oq_ptr,
                      os_ptr, N, alpha, limit, GLU, HAS_BIAS, TM, BN)


@triton.jit
def _grouped_epilogue(acc_g, acc_u, e, members, mmask, n, nmask, bg_ptr, bu_ptr, rw_ptr, out_ptr, oq_ptr,
                      os_ptr, N, alpha, limit, GLU: tl.constexpr, HAS_BIAS: tl.constexpr, TM: tl.constexpr,
                      BN: tl.constexpr):
    """acc_* [TM, BN] of the group's members (mmask) -> GLU: the quantized SwiGLU rows (oq, os); down: the
    routed-weighted rows, fp32, at out[members]."""
    if HAS_BIAS:  # one expert: one bias row for every member
        acc_g += tl.load(bg_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if GLU:
        if HAS_BIAS:
            acc_u += tl.load(bu_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        y = (g * tl.sigmoid(g * alpha) * (u + 1)).to(out_ptr.dtype.element_ty).to(tl.float32)  # act dtype
        nb: tl.constexpr = BN // 32
        cols = tl.program_id(1) * nb + tl.arange(0, nb)  # the tile's 32-output blocks
        blk = members.to(tl.int64)[:, None] * (N // 32) + cols[None, :]  # [TM, nb] block of xq
        bm = mmask[:, None] & (cols < N // 32)[None, :]
        store_quant32(tl.reshape(y, (TM * nb, 8, 4)), oq_ptr, os_ptr, tl.reshape(blk, (TM * nb,)),
                      tl.reshape(bm, (TM * nb,)))
    else:
        y = acc_g * tl.load(rw_ptr + members, mask=mmask, other=0.0).to(tl.float32)[:, None]
        optrs = out_ptr + members.to(tl.int64)[:, None] * N + n[None, :]
        tl.store(optrs, y, mask=mmask[:, None] & nmask[None, :])


def _launch(xq, ids, w, w_up, b, b_up, route_w, top_k, out, oq, os_, launch, alpha, limit):
    words, scales = xq
    glu = w_up is not None
    p, n_out, k = ids.numel(), w[0].shape[1], words.shape[1] * 4
    bn, kb, warps = launch
    tm = triton.next_power_of_2(max(1, p // top_k))  # an expert's pairs at most: one per token
    dummy = w[0]
    wg = _words(w)
    _grouped_i8_kernel[(p, triton.cdiv(n_out, bn))](
        words, scales, ids, *wg, *(_words(w_up) if glu else wg), b if b is not None else dummy,
        b_up if b_up is not None else dummy, route_w if route_w is not None else dummy, out,
        oq if oq is not None else dummy, os_ if os_ is not None else dummy, p, n_out, k, alpha, limit,
        A_DIV=top_k if glu else 1, GLU=glu, HAS_BIAS=b is not None, PP=triton.next_power_of_2(p), TM=tm,
        BN=bn, KB=kb, ASM=asm_ok(words.device), num_warps=warps, **launch_opts(words.device))


def glu_i8_grouped(xq: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, w_gate: Split, w_up: Split,
                   b_gate: torch.Tensor | None, b_up: torch.Tensor | None, top_k: int, act_dtype: torch.dtype,
                   alpha: float = 1.702, limit: float = 7.0, launch: tuple[int, int, int] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """xq = quantize_x(x) of x [T, K]; ids [P = T * top_k] (each token's experts distinct) -> the clamped
    SwiGLU [P, F] rounded to act_dtype, quantized: (words int32 [P, F / 4], scales fp32 [P, F / 32, 4])."""
    p, f = ids.numel(), w_gate[0].shape[1]
    launch = launch or GLU_LAUNCH
    if f % 32 or launch[0] % 32:
        raise ValueError(f"F = {f} and BN = {launch[0]} must be multiples of 32 (quantized epilogue)")
    dev = xq[0].device
    oq = torch.empty((p, f // 4), dtype=torch.int32, device=dev)
    os_ = torch.empty((p, f // 32, 4), dtype=torch.float32, device=dev)
    typed = torch.empty(1, dtype=act_dtype, device=dev)  # only its dtype is read: the rounding
    _launch(xq, ids, w_gate, w_up, b_gate, b_up, None, top_k, typed, oq, os_, launch, alpha, limit)
    return oq, os_


def down_i8_grouped(aq: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, w_down: Split,
                    b_down: torch.Tensor | None, route_w: torch.Tensor, top_k: int,
                    launch: tuple[int, int, int] | None = None) -> torch.Tensor:
    """aq: quantized activations of the P pairs -> fp32 [P, H]: (W_d a + b_d) * route_w per pair."""
    out = torch.empty((ids.numel(), w_down[0].shape[1]), dtype=torch.float32, device=aq[0].device)
    _launch(aq, ids, w_down, None, b_down, None, route_w, top_k, out, None, None, launch or DOWN_LAUNCH,
            1.702, 7.0)
    return out


@triton.jit
def _sum_kernel(y_ptr, res_ptr, N, TOP_K: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = n < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in tl.static_range(TOP_K):  # slot order, fp32
        acc += tl.load(y_ptr + (t * TOP_K + s) * N + n, mask=m, other=0.0)
    acc += tl.load(res_ptr + t * N + n, mask=m, other=0.0).to(tl.float32)
    tl.store(res_ptr + t * N + n, acc.to(res_ptr.dtype.element_ty), mask=m)


def moe_sum(y: torch.Tensor, top_k: int, residual: torch.Tensor) -> torch.Tensor:
    """residual [T, H] += sum over each token's k rows of y [T * k, H] fp32, in place, rounded once."""
    t, hid = residual.shape
    block = 1024
    _sum_kernel[(t, triton.cdiv(hid, block))](y, residual, hid, TOP_K=top_k, BLOCK=block, num_warps=4,
                                              **launch_opts(y.device))
    return residual


def moe_mlp_i8_grouped(hq: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, gate: Split, up: Split,
                       down: Split, biases: tuple, route_w: torch.Tensor, top_k: int, residual: torch.Tensor,
                       launches: tuple | None = None) -> torch.Tensor:
    """moe_mlp_i8 with the pairs grouped by expert, from hq = quantize_x(h) (norm_route(quant=True) makes
    it): 3 launches (gate/up + quantize, down, slot sum + residual). launches: (glu, down) overrides."""
    bg, bu, bd = biases
    lg, ld = launches or (None, None)
    aq = glu_i8_grouped(hq, ids, gate, up, bg, bu, top_k, residual.dtype, launch=lg)
    return moe_sum(down_i8_grouped(aq, ids, down, bd, route_w, top_k, launch=ld), top_k, residual)
