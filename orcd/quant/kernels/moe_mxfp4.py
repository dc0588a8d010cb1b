"""Triton MoE kernels over MXFP4 expert weights (gpt-oss): only the routed experts' blocks are read,
dequantized in registers, never written out.

Weights come split (orcd/quant/mxfp4.py split_blocks_, in the file's own bytes): scales uint8
[E, out, in / 32] (E8M0 exponents) and codes uint8 [E, out, in / 2] (block b's 16 bytes hold element
b * 32 + j in the low nibble of byte j and element b * 32 + 16 + j in the high one). A K step covers KB
blocks: a [BN, KB * 16] tile of code bytes -- contiguous per row, so read in 16-byte vector loads -- gives
two weight tiles, the low nibbles and the high ones, each multiplied with the activation columns it
belongs to. "Pairs" are (token, expert slot): pair p = token p // top_k, slot p % k.

Two paths:
- the GEMV of orcd/quant/kernels/moe_gemv.py: one program per (pair or token, output tile); for a few
  pairs (decode at small batch). Its E2M1 / E8M0 decode (bit operations through fp16) is shared here.
- `_moe_grouped_kernel`: pairs sorted by expert into blocks of BM rows (each block one expert, padded with
  the sentinel P); one program per (block, output tile), tl.dot on [BM, K] x [K, BN]; every block reads
  its expert's tile once. The block count is the bound cdiv(P, BM) + min(E, P), fixed by shapes: empty
  blocks exit at once, so nothing is read back to the host and the step can be captured in a CUDA graph.
Epilogues: GLU (gate and up in one program, both tiles from one pass over x): h = clamped SwiGLU of the
two (+ biases); else y = (acc + bias) * routing weight of the pair.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.moe_gemv import Split, _e2m1_hi, _e2m1_lo, _e8m0_scale, moe_gemv

# pairs (tokens * top_k) up to which the GEMV runs; above, the grouped path. H100, 24 layers of gate+up
# and down at 8 tokens (32 pairs): GEMV 7.4 ms, grouped 8.5 ms (bench/results/moe_mxfp4_gemv.json)
GEMV_MAX_PAIRS = 32
BM = 16  # grouped path: rows (pairs of one expert) per block; tl.dot needs >= 16


@triton.jit
def _w_tiles(s_ptr, q_ptr, rows, nmask, blk0, n_blocks, BN: tl.constexpr, KB: tl.constexpr,
             DT: tl.constexpr):
    """rows [BN] int64 = expert * out + n of the tile's rows -> (low, high) [BN, KB * 16] in DT:
    low[r, c] = W[r, (blk0 + c // 16) * 32 + c % 16], high[r, c] = W[r, ... + 16]."""
    j = tl.arange(0, KB * 16)
    b = tl.arange(0, KB)
    qm = nmask[:, None] & ((blk0 + j // 16) < n_blocks)[None, :]
    q = tl.load(q_ptr + rows[:, None] * (n_blocks * 16) + (blk0 * 16 + j)[None, :], mask=qm, other=0)
    sm = nmask[:, None] & ((blk0 + b) < n_blocks)[None, :]
    s = tl.load(s_ptr + rows[:, None] * n_blocks + (blk0 + b)[None, :], mask=sm, other=0)
    s = _e8m0_scale(s)
    s = tl.reshape(tl.broadcast_to(s[:, :, None], (BN, KB, 16)), (BN, KB * 16))  # each block's scale x16
    return (_e2m1_lo(q).to(tl.float32) * s).to(DT), (_e2m1_hi(q).to(tl.float32) * s).to(DT)


@triton.jit
def _epilogue(acc_g, acc_u, pairs, pmask, n, nmask, e, bg_ptr, bu_ptr, rw_ptr, out_ptr, N,
              GLU: tl.constexpr, HAS_BIAS: tl.constexpr, alpha, limit):
    """acc_* [R, BN] fp32 for pairs [R] (rows) and columns n [BN] of expert e (scalar or [R]) -> out."""
    if HAS_BIAS:
        acc_g += tl.load(bg_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if GLU:
        if HAS_BIAS:
            acc_u += tl.load(bu_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        y = g * tl.sigmoid(g * alpha) * (u + 1)
    else:
        y = acc_g * tl.load(rw_ptr + pairs, mask=pmask, other=0.0).to(tl.float32)[:, None]
    optrs = out_ptr + pairs.to(tl.int64)[:, None] * N + n[None, :]
    tl.store(optrs, y.to(out_ptr.dtype.element_ty), mask=pmask[:, None] & nmask[None, :])


@triton.jit
def _moe_grouped_kernel(x_ptr, rows_ptr, bexp_ptr, sg_ptr, qg_ptr, su_ptr, qu_ptr, bg_ptr, bu_ptr, rw_ptr,
                        out_ptr, P, N, K, alpha, limit, A_DIV: tl.constexpr, GLU: tl.constexpr,
                        HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, KB: tl.constexpr,
                        IEEE: tl.constexpr):
    e = tl.load(bexp_ptr + tl.program_id(0)).to(tl.int64)
    if e < 0:  # a block past the last expert's rows: the bound on the block count is not tight
        return
    pairs = tl.load(rows_ptr + tl.program_id(0) * BM + tl.arange(0, BM))
    pmask = pairs < P
    arow = tl.where(pmask, pairs // A_DIV, 0).to(tl.int64)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < N
    wrows = e * N + n.to(tl.int64)
    j = tl.arange(0, KB * 16)
    acc_g = tl.zeros([BM, BN], dtype=tl.float32)
    acc_u = tl.zeros([BM, BN], dtype=tl.float32)
    n_blocks = K // 32
    DT = x_ptr.dtype.element_ty
    for blk0 in range(0, n_blocks, KB):
        kcol = (blk0 + j // 16) * 32 + j % 16
        xm = pmask[:, None] & (kcol < K)[None, :]
        xp = x_ptr + arow[:, None] * K + kcol[None, :]
        x_lo = tl.load(xp, mask=xm, other=0.0)
        x_hi = tl.load(xp + 16, mask=xm, other=0.0)
        lo, hi = _w_tiles(sg_ptr, qg_ptr, wrows, nmask, blk0, n_blocks, BN, KB, DT)
        if IEEE:
            acc_g += tl.dot(x_lo, tl.trans(lo), input_precision="ieee")
            acc_g += tl.dot(x_hi, tl.trans(hi), input_precision="ieee")
        else:
            acc_g += tl.dot(x_lo, tl.trans(lo)) + tl.dot(x_hi, tl.trans(hi))
        if GLU:
            lo, hi = _w_tiles(su_ptr, qu_ptr, wrows, nmask, blk0, n_blocks, BN, KB, DT)
            if IEEE:
                acc_u += tl.dot(x_lo, tl.trans(lo), input_precision="ieee")
                acc_u += tl.dot(x_hi, tl.trans(hi), input_precision="ieee")
            else:
                acc_u += tl.dot(x_lo, tl.trans(lo)) + tl.dot(x_hi, tl.trans(hi))
    _epilogue(acc_g, acc_u, pairs, pmask, n, nmask, e, bg_ptr, bu_ptr, rw_ptr, out_ptr, N, GLU, HAS_BIAS,
              alpha, limit)


def align_by_expert(ids: torch.Tensor, n_experts: int, bm: int = BM) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [P] int64 expert of each pair -> (rows [NB * bm] int32: pair indices grouped by expert, each
    expert's run padded to a multiple of bm with P; block_expert [NB] int32: the expert of each block, -1
    past the end). NB = cdiv(P, bm) + min(E, P), a bound fixed by shapes; device ops only (no host sync)."""
    p = ids.numel()
    nb = triton.cdiv(p, bm) + min(n_experts, p)
    # rank of each pair among its expert's pairs (stable), from a running count along the pairs (the
    # innermost dim: torch's scan over an outer dim took ~40 us a layer at 256 pairs on an H100, a sort
    # ~27 us)
    seen = torch.zeros((n_experts, p), dtype=torch.int32, device=ids.device)
    seen.scatter_(0, ids[None, :], 1).cumsum_(1)  # [E, P]: how many pairs of expert e up to and at p
    rank = seen.gather(0, ids[None, :]).squeeze(0).long() - 1
    counts = seen[:, -1].long()
    padded = (counts + bm - 1) // bm * bm
    pend = torch.cumsum(padded, 0)  # end of each expert's padded run
    rows = torch.full((nb * bm,), p, dtype=torch.int32, device=ids.device)
    rows.scatter_(0, (pend - padded)[ids] + rank, torch.arange(p, dtype=torch.int32, device=ids.device))
    starts = torch.arange(nb, device=ids.device, dtype=torch.int64) * bm
    bexp = torch.searchsorted(pend, starts, right=True)  # n_experts past the last run
    return rows, torch.where(bexp < n_experts, bexp, -1).to(torch.int32)


# (BN, KB, num_warps) of the grouped kernel (BM = 16 rows): the best of the H100 sweep at 16 and 64
# tokens for gate+up and down (bench/results/moe_mxfp4_gemv.json)
GROUPED_LAUNCH = (64, 4, 4)


def moe_mxfp4(x: torch.Tensor, ids: torch.Tensor, w_gate: Split, w_up: Split | None,
              b_gate: torch.Tensor | None, b_up: torch.Tensor | None, route_w: torch.Tensor | None,
              top_k: int, alpha: float = 1.702, limit: float = 7.0, grouped: bool | None = None,
              launch: tuple[int, int, int] | None = None,
              align: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """One expert projection for every pair. x [T, K] (GLU: per token, read by pairs // top_k) or [P, K]
    (down: per pair, top_k ignored); ids [P] int expert per pair; w_* split MXFP4 (scales, codes) of
    [E, N, K]; b_* [E, N] or None; route_w [P] (down only). -> [P, N] in x.dtype: GLU (w_up given) the
    clamped SwiGLU of gate and up, else the routed-weighted projection. grouped None: by GEMV_MAX_PAIRS;
    launch: (BN, KB, num_warps), default moe_gemv's GEMV_LAUNCH / GROUPED_LAUNCH; align: align_by_expert(ids)
    already made (the gate/up and down calls of a layer share it)."""
    p = ids.numel()
    if grouped is None:
        grouped = p > GEMV_MAX_PAIRS
    if not grouped:
        return moe_gemv(x, ids, w_gate, w_up, b_gate, b_up, route_w, top_k, 1, alpha, limit, launch)
    glu = w_up is not None
    n_exp, n_out = w_gate[0].shape[0], w_gate[0].shape[1]
    k = x.shape[1]
    x = x.contiguous()
    out = torch.empty((p, n_out), dtype=x.dtype, device=x.device)
    dummy = w_gate[0]  # never read when the matching constexpr is off
    args = (*w_gate, *(w_up if glu else (dummy, dummy)), b_gate if b_gate is not None else dummy,
            b_up if b_up is not None else dummy, route_w if route_w is not None else dummy, out)
    flags = dict(A_DIV=top_k if glu else 1, GLU=glu, HAS_BIAS=b_gate is not None)
    rows, bexp = align if align is not None else align_by_expert(ids.long(), n_exp)
    bn, kb, warps = launch or GROUPED_LAUNCH
    _moe_grouped_kernel[(bexp.numel(), triton.cdiv(n_out, bn))](
        x, rows, bexp, *args, p, n_out, k, alpha, limit, BM=BM, BN=bn, KB=kb,
        IEEE=x.dtype == torch.float32, num_warps=warps, **flags)
    return out
