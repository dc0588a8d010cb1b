"""q, k and v of a decode batch (M = 5..64 rows) in one launch over their raw GGUF blocks.

y_j[M, N_j] = x[M, K] @ W_j[N_j, K].T for the three weights j = q, k, v (each its own type of MM_TILES and
its own bias, all or none). One grid covers the BN-row tiles of the three weights one after another (as
gemv_multi.py's GEMV does at <= 4 rows); each program runs batched_linear's loop (W's tile dequantized
in registers, tl.dot on the tensor cores into an fp32 [BN, BM] accumulator, W as the first operand) on
its own weight. K is split as in batched_linear when the tiles of all three together are too few to
fill the GPU: ranges of whole 256-input steps (a multiple of every routed type's K step), fp32 partials
[splits, M, N_j] per weight summed in split order (deterministic) by the last of a tile's programs to
arrive (an int32 counter per tile, as fused_linear's split GEMV), or by split_k.reduce_partials.
This takes the place of three launches (two products and, for a Q6_K v under MM_ROUTE's floor,
dequantize + cuBLAS) at 7B's 3584 / 512 / 512 rows, whose tiles alone fill a third of an H100 at best.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.batched_linear import MM_LAUNCH, MM_TILES, mm_dot, mm_views, w_tile
from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.split_k import (
    TARGET_PROGRAMS,
    partials,
    reduce_partials,
    row_tile,
    split_counters,
    steps_per_split,
)

# Large q/k/v at 5..32 rows take three fused_linear calls (for Q4_K the CUDA-C tensor-core kernel)
# instead: one H200, the 72B's Q4_K q/k/v (8192 inputs; bench/kernels/m1_72b.py --batched,
# bench/results/tp4_s25/): 10240 rows (one GPU) batched_qkv 90.8 / 91.6 / 80.5 us at 8 / 16 / 32 rows, three
# products 42.2 / 52.8 / 56.5; a TP 2 rank's 5120 rows 49.2 / 49.5 / 43.7 against 33.9 / 39.1 / 42.1. At
# 64 rows (TP 2: 61.8 against more) and at a TP 4 rank's 2560 rows (21.6 against 32.1 at 8) one launch
# wins. The 7B's 4608 x 3584, the engine on one H200, twice each (bench/results/gemv_i8_s30/): three
# products 2,218 / 2,222 tok/s at 8 streams against one launch's 2,171 / 2,171, at 32 6,178 / 6,169 against
# 6,158 / 6,151; at 64 streams three lose (8,580 / 8,571 against 8,865 / 8,863). So the rule is by output
# rows: 4608 and more take three products at <= 32 rows, 2560 (the TP 4 rank) one launch.
THREE_MIN_OUT = 4096
THREE_MAX_ROWS = 32
SPLIT_STEP = 256  # inputs: split ranges are whole multiples of this (every MM_TILES K step divides it)
Weight = tuple[torch.Tensor, int, int, torch.Tensor | None]  # (raw [out, row_bytes], out, qtype, bias)


@triton.jit
def _piece(pid_n, pid_m, split, x_ptr, w8, w16, w32, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm, w_row,
           k_split, cnt_ptr, cnt_idx, splits, QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
           IEEE: tl.constexpr, LAST: tl.constexpr, Q6S: tl.constexpr = False):
    """One [BM, BN] tile of y = x @ W.T over inputs [split * k_split, +k_split): y [M, N] contiguous, or
    (SPLIT) the fp32 partial ws [splits, M, N]; with LAST the last of the tile's `splits` programs to
    arrive (int32 counter cnt_ptr[cnt_idx], reset after use) sums the partials in split order and writes y."""
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    BK: tl.constexpr = S * G
    row_off = rn.to(tl.int64)[:, None, None] * w_row  # [BN, 1, 1] byte offset of each weight row
    acc = tl.zeros([BN, BM], dtype=tl.float32)
    k_lo = split * k_split
    k_hi = tl.minimum(k_lo + k_split, K)
    for k0 in range(k_lo, k_hi, BK):
        w = w_tile(w8, w16, w32, row_off, nmask[:, None, None], k0, K, QT, S, G, Q6S)
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=mmask[:, None] & (kk[None, :] < K), other=0.0)  # [BM, BK]
        acc = mm_dot(w.to(x.dtype), tl.trans(x), acc, IEEE)
    out = tl.trans(acc)  # [BM, BN]
    omask = mmask[:, None] & nmask[None, :]
    if SPLIT:
        ws = ws_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :]  # split 0's partial; split j: + j * M * N
        tl.store(ws + split * M * N, out, mask=omask)
        if LAST:
            tl.debug_barrier()
            if tl.atomic_add(cnt_ptr + cnt_idx, 1, sem="acq_rel") == splits - 1:
                total = tl.zeros([BM, BN], dtype=tl.float32)
                for j in range(0, splits):
                    total += tl.load(ws + j * M * N, mask=omask, other=0.0, cache_modifier=".cg")
                tl.atomic_xchg(cnt_ptr + cnt_idx, 0, sem="relaxed")
                _store_y(total, rm, rn, omask, b_ptr, y_ptr, N, HAS_BIAS)
    else:
        _store_y(out, rm, rn, omask, b_ptr, y_ptr, N, HAS_BIAS)


@triton.jit
def _store_y(out, rm, rn, omask, b_ptr, y_ptr, N, HAS_BIAS: tl.constexpr):
    """y [M, N] (contiguous) at rows rm, columns rn = out (+ bias[rn])."""
    if HAS_BIAS:
        out += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :], out.to(y_ptr.dtype.element_ty), mask=omask)


@triton.jit
def _qkv_kernel(x_ptr, M, K, stride_xm, k_split, cnt_ptr, splits,
                a8, a16, a32, ab, ay, aws, NA, ra, b8, b16, b32, bb, by, bws, NB, rb,
                c8, c16, c32, cb, cy, cws, NC, rc,
                QA: tl.constexpr, SA: tl.constexpr, GA: tl.constexpr, QB: tl.constexpr, SB: tl.constexpr,
                GB: tl.constexpr, QC: tl.constexpr, SC: tl.constexpr, GC: tl.constexpr, BM: tl.constexpr,
                BN: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                LAST: tl.constexpr, Q6SA: tl.constexpr = False, Q6SB: tl.constexpr = False,
                Q6SC: tl.constexpr = False):
    # program (tile t of q's, then k's, then v's BN-row tiles; m tile; split); LAST: split-K summed by
    # the last program of each (tile, m tile) to arrive, counter cnt_ptr[t * m tiles + m tile];
    # Q6SA/B/C: that weight is Q6_K in layout.split_q6_k's layout
    pid = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    cnt_idx = pid * tl.num_programs(1) + pid_m
    na = tl.cdiv(NA, BN)
    nb = tl.cdiv(NB, BN)
    if pid < na:
        _piece(pid, pid_m, split, x_ptr, a8, a16, a32, ab, ay, aws, M, NA, K, stride_xm, ra, k_split,
               cnt_ptr, cnt_idx, splits, QA, SA, GA, BM, BN, SPLIT, HAS_BIAS, IEEE, LAST, Q6SA)
    elif pid < na + nb:
        _piece(pid - na, pid_m, split, x_ptr, b8, b16, b32, bb, by, bws, M, NB, K, stride_xm, rb, k_split,
               cnt_ptr, cnt_idx, splits, QB, SB, GB, BM, BN, SPLIT, HAS_BIAS, IEEE, LAST, Q6SB)
    else:
        _piece(pid - na - nb, pid_m, split, x_ptr, c8, c16, c32, cb, cy, cws, M, NC, K, stride_xm, rc,
               k_split, cnt_ptr, cnt_idx, splits, QC, SC, GC, BM, BN, SPLIT, HAS_BIAS, IEEE, LAST, Q6SC)


def qkv_routed(weights: list[Weight], in_features: int) -> bool:
    """Whether batched_qkv runs these three weights: MM_TILES types, K a whole number of 256-input
    steps, biases all present or all absent."""
    return (len(weights) == 3 and all(int(qt) in MM_TILES for _r, _o, qt, _b in weights)
            and in_features % SPLIT_STEP == 0 and len({b is None for *_w, b in weights}) == 1)


def qkv_one_launch(weights: list[Weight], m: int, in_features: int) -> bool:
    """Whether the unfused decode step (DecodeProducts.qkv_rows) runs these three weights for an m-row
    batch in one batched_qkv launch (qkv_routed) rather than three fused_linear calls: not for large
    q/k/v (>= THREE_MIN_OUT output rows together) at <= THREE_MAX_ROWS rows."""
    big = sum(o for _r, o, _q, _b in weights) >= THREE_MIN_OUT
    return qkv_routed(weights, in_features) and not (big and m <= THREE_MAX_ROWS)


def qkv_plan(m: int, outs: list[int], k: int, bn: int, target: int = TARGET_PROGRAMS) -> tuple[int, int]:
    """(BM, 256-input steps per split) for x [m, k] times the three weights of `outs` rows."""
    bm = row_tile(m)
    return bm, steps_per_split(triton.cdiv(k, SPLIT_STEP), m, sum(outs), bm, bn, target)


def batched_qkv(x: torch.Tensor, weights: list[Weight], in_features: int,
                launch: tuple[int, int, int] = MM_LAUNCH,
                target: int = TARGET_PROGRAMS, reduce_in_kernel: bool = True,
                split: tuple[bool, bool, bool] = (False, False, False)) -> list[torch.Tensor]:
    """x [M, in] (bf16/fp16/fp32) -> [y_j [M, out_j] in x.dtype, each contiguous] for the three weights
    (qkv_routed); launch: (BN, num_warps, num_stages); target: programs to aim for with split-K.
    reduce_in_kernel: split-K partials summed by each tile's last program (no reduce launches), else
    (and while capturing before the counters exist) by split_k.reduce_partials, one launch per weight.
    split: per weight, Q6_K in layout.split_q6_k's layout (the same values as on GGUF's blocks)."""
    if not qkv_routed(weights, in_features) or x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError("batched_qkv: three MM_TILES weights, x [M, in], in % 256 == 0, biases all or none")
    x = x.contiguous()
    m, k = x.shape
    bn, warps, stages = launch
    outs = [o for _r, o, _q, _b in weights]
    ys = [torch.empty((m, o), dtype=x.dtype, device=x.device) for o in outs]
    if m == 0:
        return ys
    bm, sps = qkv_plan(m, outs, k, bn, target)
    splits = triton.cdiv(triton.cdiv(k, SPLIT_STEP), sps)
    wss = [partials(splits, y) for y in ys]
    args, consts = [], {}
    for j, ((raw, out_f, qtype, bias), y, ws, sp) in enumerate(zip(weights, ys, wss, split, strict=True)):
        qt = int(qtype)
        w_row = row_bytes(qt, in_features)
        if raw.dtype != torch.uint8 or raw.numel() != out_f * w_row:
            raise ValueError(f"weight {j}: raw must be uint8 [{out_f}, {w_row}]")
        args += [*mm_views(raw, qt, sp), bias, y, ws, out_f, w_row]
        s, g = MM_TILES[qt]
        consts.update({f"Q{'ABC'[j]}": qt, f"S{'ABC'[j]}": s, f"G{'ABC'[j]}": g, f"Q6S{'ABC'[j]}": bool(sp)})
    grid = (sum(triton.cdiv(o, bn) for o in outs), triton.cdiv(m, bm), splits)
    cnt = split_counters(x.device, grid[0] * grid[1]) if splits > 1 and reduce_in_kernel else None
    _qkv_kernel[grid](
        x, m, k, x.stride(0), sps * SPLIT_STEP, cnt, splits, *args, **consts, BM=bm, BN=bn, SPLIT=splits > 1,
        HAS_BIAS=weights[0][3] is not None, IEEE=x.dtype == torch.float32, LAST=cnt is not None,
        num_warps=warps, num_stages=stages)
    if cnt is None:
        for (_r, _o, _q, bias), y, ws in zip(weights, ys, wss, strict=True):
            reduce_partials(ws, bias, y)
    return ys
