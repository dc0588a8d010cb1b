"""Decode GEMVs for Q4_K and Q6_K with int8 activations (llama.cpp's MMVQ idea, written for Triton).

x comes quantized per 32 inputs (xquant.py: int8 words + (dx, sums of x) per 32). Weight words are
turned into 4 small integers each with a mask and shift, and one dp4a (4-way int8 dot, int32 sum)
multiplies them with the matching x word: about 1.5 integer instructions per weight instead of the
~5 of gemv_tiles.py's fp32 dequantize.
- Q4_K: a word of a 64-input chunk c holds elements 4w..4w+3 of sub-block 2c (low nibbles) and of
  2c + 1 (high nibbles). Per sub-block j: d * sc_j * dx_j * dot(nibbles, xq) - dmin * m_j * sum(x).
  Blocks are read in int32 words only, each block's 16-byte head in one load (q4k_head.py).
- Q6_K (210-byte blocks: only 2-byte aligned, words read as two halfwords): a word w of half h's ql,
  ql[32:] and qh gives 4 values 0..63 for each of the 32-input groups k = 0..3 (elements h * 128 + 32k
  + 4w + i); per 16-input scale group: d * sc * (dx * dot(v, xq) - 32 * sum(x)).
Only the dot sees x's int8 rounding (|x - dx * xq| <= dx / 2); offset terms use x's exact sums.
Each program takes NT tokens (x rows): it loads a weight tile once and dp4a's it against all NT
tokens' x words (a leading token axis on every tile), so N <= NT rows read each weight once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import _views, launch_opts
from orcd.quant.kernels.gemv_tiles import _f16
from orcd.quant.kernels.int8_launch import i8_launch, i8_splits
from orcd.quant.kernels.layout import q6k_views
from orcd.quant.kernels.q4k_head import q4k_scales, q4k_words
from orcd.quant.kernels.split_k import split_counters, split_sum
from orcd.quant.kernels.xquant import asm_ok, dp4a, quantize_x, store_quant32


@triton.jit
def _q4k_pass(p32, row16, rmask, xq, xs, tm, k0, K, G: tl.constexpr, ASM: tl.constexpr, WAIT: tl.constexpr,
              PDL: tl.constexpr, s32=None, DUAL: tl.constexpr = False):
    """G 64-input chunks from k0: partial sums [NT, BO, G, 1] (and the second matrix's, DUAL, at s32);
    p32 the raw blocks as int32 (q4k_head.py); row16, rmask [1, BO, 1, 1]; xq, xs, tm: each token's x
    rows and mask [NT, 1, 1, 1]. Weight loads are issued first; WAIT (the first pass) then waits for the
    previous kernel (PDL) before x."""
    gc = tl.arange(0, G)[None, None, :, None]
    ch = k0 // 64 + gc
    km = ch * 64 < K
    blk16 = row16 + (ch // 4) * 72
    w = tl.arange(0, 8)[None, None, None, :]
    c = ch % 4
    wa = q4k_words(p32, blk16, c, w, rmask & km)
    wb = wa
    if DUAL:
        wb = q4k_words(s32, blk16, c, w, rmask & km)
    if WAIT and PDL:
        tl.extra.cuda.gdc_wait()
        if PDL == 3:
            tl.extra.cuda.gdc_launch_dependents()
    xm = km & tm
    if DUAL:  # x read per row, in the weights' layout: no layout conversions (sm_90, SwiGLU NT 1: 80 -> 72
        xm = tl.broadcast_to(xm, (xm.shape[0], rmask.shape[1], xm.shape[2], 1))  # regs, 53 -> 17 bar.sync)
    xlo = tl.load(xq + ch * 16 + w, mask=xm, other=0)
    xhi = tl.load(xq + ch * 16 + 8 + w, mask=xm, other=0)
    s = xs + ch * 8  # sub-block 2ch: (dx, sum, sum, 0) at 8ch..8ch+3; 2ch + 1 at 8ch + 4..
    xt = (xlo, xhi, tl.load(s, mask=xm, other=0.0), tl.load(s + 1, mask=xm, other=0.0)
          + tl.load(s + 2, mask=xm, other=0.0), tl.load(s + 4, mask=xm, other=0.0),
          tl.load(s + 5, mask=xm, other=0.0) + tl.load(s + 6, mask=xm, other=0.0))
    a = _dot_q4k(wa, c, xt, ASM)
    b = a
    if DUAL:
        b = _dot_q4k(wb, c, xt, ASM)
    return a, b


@triton.jit
def _dot_q4k(wt, c, xt, ASM: tl.constexpr):
    w0, w1, w2, w3, q = wt
    d, dmin, sc_lo, m_lo, sc_hi, m_hi = q4k_scales(w0, w1, w2, w3, c)
    xlo, xhi, dlo, slo, dhi, shi = xt
    ilo = tl.sum(dp4a(q & 0x0F0F0F0F, xlo, ASM), axis=3, keep_dims=True).to(tl.float32)
    ihi = tl.sum(dp4a((q >> 4) & 0x0F0F0F0F, xhi, ASM), axis=3, keep_dims=True).to(tl.float32)
    return d * (sc_lo * dlo * ilo + sc_hi * dhi * ihi) - dmin * (m_lo * slo + m_hi * shi)


@triton.jit
def _word(p16, off16, m):
    """int32 from two halfwords (2-byte aligned data)."""
    lo = tl.load(p16 + off16, mask=m, other=0).to(tl.int32) & 0xFFFF
    return lo | (tl.load(p16 + off16 + 1, mask=m, other=0).to(tl.int32) << 16)


@triton.jit
def _q6k_pass(p8, p16, p32, row16, rmask, xq, xs, tm, k0, K, G: tl.constexpr, NT: tl.constexpr,
              BO: tl.constexpr, ASM: tl.constexpr, WAIT: tl.constexpr, PDL: tl.constexpr,
              SPLIT: tl.constexpr):
    """G 128-input halves from k0: partial sums [NT, BO, G, 2, 1] (dims: tokens, rows, halves, scale
    group, 1); row16, rmask [1, BO, 1, 1, 1]; xq, xs, tm [NT, 1, 1, 1, 1]. SPLIT (layout.split_q6_k):
    row16 is each row's first block index, p32 the 208-byte blocks as words (16-byte aligned: int32
    loads), p16 the d's fp16."""
    gh = tl.arange(0, G)[None, None, :, None, None]
    gg = tl.arange(0, 2)[None, None, None, :, None]
    w = gg * 4 + tl.arange(0, 4)[None, None, None, None, :]  # word 0..7 of the half's 32 bytes
    hh = k0 // 128 + gh
    km = hh * 128 < K
    m = rmask & km
    half = hh % 2
    if SPLIT:
        blkw = (row16 + hh // 2) * 52  # [1, BO, G, 1, 1]: the block's first word, a multiple of 4
        qla = tl.load(p32 + tl.multiple_of(blkw + half * 16, (4, 4, 4, 4, 4)) + w, mask=m, other=0)
        qlb = tl.load(p32 + tl.multiple_of(blkw + half * 16 + 8, (4, 4, 4, 4, 4)) + w, mask=m, other=0)
        qh = tl.load(p32 + tl.multiple_of(blkw + 32 + half * 8, (4, 4, 4, 4, 4)) + w, mask=m, other=0)
        d = tl.load(p16 + row16 + hh // 2, mask=m, other=0).to(tl.float32)  # [1, BO, G, 1, 1]
        sc = p8 + blkw * 4 + 192 + half * 8 + gg
    else:
        blk16 = row16 + (hh // 2) * 105
        qla = _word(p16, blk16 + half * 32 + 2 * w, m)
        qlb = _word(p16, blk16 + half * 32 + 16 + 2 * w, m)
        qh = _word(p16, blk16 + 64 + half * 16 + 2 * w, m)
        d = _f16(p16, blk16 + 104, m)  # [1, BO, G, 1, 1]
        sc = p8 + blk16 * 2 + 192 + half * 8 + gg  # + 2k: group k's two scales
    if WAIT and PDL:
        tl.extra.cuda.gdc_wait()
        if PDL == 3:
            tl.extra.cuda.gdc_launch_dependents()
    xm = km & tm
    acc = tl.zeros((NT, BO, G, 2, 1), tl.float32)
    for k in tl.static_range(4):
        if k == 0:
            v = (qla & 0x0F0F0F0F) | ((qh & 0x03030303) << 4)
        elif k == 1:
            v = (qlb & 0x0F0F0F0F) | ((qh & 0x0C0C0C0C) << 2)
        elif k == 2:
            v = ((qla >> 4) & 0x0F0F0F0F) | (qh & 0x30303030)
        else:
            v = ((qlb >> 4) & 0x0F0F0F0F) | ((qh >> 2) & 0x30303030)
        xw = tl.load(xq + hh * 32 + 8 * k + w, mask=xm, other=0)
        xb = xs + (hh * 4 + k) * 4
        dx = tl.load(xb, mask=xm, other=0.0)
        s16 = tl.load(xb + 1 + gg, mask=xm, other=0.0)
        dot = tl.sum(dp4a(v, xw, ASM), axis=4, keep_dims=True).to(tl.float32)
        scale = tl.load(sc + 2 * k, mask=m, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        acc += scale * (dx * dot - 32.0 * s16)
    return d * acc


@triton.jit
def _epilogue(out, rows, tok, N, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS: tl.constexpr, RES: tl.constexpr):
    """out [NT, BO] -> y[tok, rows] (+ bias; RES: + y's old value, the residual stream, in place)."""
    m = (tok < N)[:, None] & (rows < OUT)[None, :]
    if HAS_BIAS:
        out += tl.load(b_ptr + rows, mask=rows < OUT, other=0.0).to(tl.float32)[None, :]
    yp = y_ptr + tok[:, None] * stride_yn + rows[None, :]
    if RES:
        out += tl.load(yp, mask=m, other=0.0).to(tl.float32)
    tl.store(yp, out.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def gemv_i8_program(pid, nb, N, xq_ptr, xs_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_yn, b_ptr,
                    QT: tl.constexpr, G: tl.constexpr, BO: tl.constexpr, NT: tl.constexpr, ASM: tl.constexpr,
                    HAS_BIAS: tl.constexpr, RES: tl.constexpr, PDL: tl.constexpr,
                    SPLIT: tl.constexpr = False, s=0, ws_ptr=None, cnt_ptr=None, S: tl.constexpr = 1):
    """Rows [pid * BO, (pid + 1) * BO) of tokens [nb * NT, (nb + 1) * NT) (< N) over all of K, or with
    S > 1 over split s's share of K's passes (ws_ptr: fp32 partials [S, N, OUT]; cnt_ptr: the arrival
    counters, split_k.split_sum); QT 12 Q4_K, 14 Q6_K (SPLIT: in layout.split_q6_k's layout, pointers
    from layout.q6k_views)."""
    rows = pid * BO + tl.arange(0, BO)
    tok = nb * NT + tl.arange(0, NT)
    if QT == 12:  # P: inputs per pass
        P = G * 64
    else:
        P = G * 128
    k_lo = 0
    k_hi = K
    if S > 1:  # split s: whole passes [k_lo, k_hi); a split past K reads nothing (its loads are masked)
        span = tl.cdiv(tl.cdiv(K, P), S) * P  # inputs per split
        k_lo = s * span
        k_hi = tl.minimum(K, k_lo + span)
    if QT == 12:
        t4 = tok[:, None, None, None]
        xq, xs, tm = xq_ptr + t4 * (K // 4), xs_ptr + t4 * (K // 8), t4 < N
        rmask = (rows < OUT)[None, :, None, None]
        row16 = rows.to(tl.int64)[None, :, None, None] * (row_bytes // 2)
        acc, _ = _q4k_pass(p32, row16, rmask, xq, xs, tm, k_lo, K, G, ASM, True, PDL)
        for k0 in range(k_lo + P, k_hi, P):
            acc += _q4k_pass(p32, row16, rmask, xq, xs, tm, k0, K, G, ASM, False, PDL)[0]
        out = tl.sum(tl.sum(acc, axis=3), axis=2)
    else:
        t5 = tok[:, None, None, None, None]
        xq, xs, tm = xq_ptr + t5 * (K // 4), xs_ptr + t5 * (K // 8), t5 < N
        rmask = (rows < OUT)[None, :, None, None, None]
        row16 = rows.to(tl.int64)[None, :, None, None, None] * (K // 256 if SPLIT else row_bytes // 2)
        acc = _q6k_pass(p8, p16, p32, row16, rmask, xq, xs, tm, k_lo, K, G, NT, BO, ASM, True, PDL, SPLIT)
        for k0 in range(k_lo + P, k_hi, P):
            acc += _q6k_pass(p8, p16, p32, row16, rmask, xq, xs, tm, k0, K, G, NT, BO, ASM, False, PDL, SPLIT)
        out = tl.sum(tl.sum(tl.sum(acc, axis=4), axis=3), axis=2)
    if S > 1:
        m = (tok < N)[:, None] & (rows < OUT)[None, :]
        ws = ws_ptr + tok[:, None] * OUT + rows[None, :]  # [NT, BO], split 0's slots
        total, last = split_sum(out, ws, N * OUT, m, cnt_ptr + nb * tl.num_programs(0) + pid, s, S)
        if last:  # the program that summed the partials
            _epilogue(total, rows, tok, N, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS, RES)
    else:
        _epilogue(out, rows, tok, N, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS, RES)


@triton.jit
def _gemv_i8_kernel(xq_ptr, xs_ptr, p8, p16, p32, y_ptr, N, OUT, K, row_bytes, stride_yn, b_ptr,
                    QT: tl.constexpr, G: tl.constexpr, BO: tl.constexpr, NT: tl.constexpr, ASM: tl.constexpr,
                    HAS_BIAS: tl.constexpr, RES: tl.constexpr, PDL: tl.constexpr = 0,
                    SPLIT: tl.constexpr = False, ws_ptr=None, cnt_ptr=None, S: tl.constexpr = 1):
    gemv_i8_program(tl.program_id(0), tl.program_id(1), N, xq_ptr, xs_ptr, p8, p16, p32, y_ptr, OUT, K,
                    row_bytes, stride_yn, b_ptr, QT, G, BO, NT, ASM, HAS_BIAS, RES, PDL, SPLIT,
                    tl.program_id(2), ws_ptr, cnt_ptr, S)


@triton.jit
def _glu_i8_kernel(xq_ptr, xs_ptr, g32, u32, y_ptr, yq_ptr, ys_ptr, N, OUT, K, row_bytes,
                   stride_yn, G: tl.constexpr, BO: tl.constexpr, NT: tl.constexpr, ASM: tl.constexpr,
                   QOUT: tl.constexpr, PDL: tl.constexpr = 0):
    # program (i, j): y[t, rows] = silu(x @ Wg.T) * (x @ Wu.T) for rows [i * BO, (i + 1) * BO) and
    # tokens t in [j * NT, (j + 1) * NT); QOUT (BO == 32): also those 32 outputs as int8 words + (dy,
    # sums), the down product's input
    tok = tl.program_id(1) * NT + tl.arange(0, NT)
    rows = tl.program_id(0) * BO + tl.arange(0, BO)
    t4 = tok[:, None, None, None]
    xq, xs, tm = xq_ptr + t4 * (K // 4), xs_ptr + t4 * (K // 8), t4 < N
    rmask = (rows < OUT)[None, :, None, None]
    row16 = rows.to(tl.int64)[None, :, None, None] * (row_bytes // 2)
    acc_g, acc_u = _q4k_pass(g32, row16, rmask, xq, xs, tm, 0, K, G, ASM, True, PDL, u32, True)
    for k0 in range(G * 64, K, G * 64):
        a, b = _q4k_pass(g32, row16, rmask, xq, xs, tm, k0, K, G, ASM, False, PDL, u32, True)
        acc_g += a
        acc_u += b
    a = tl.sum(tl.sum(acc_g, axis=3), axis=2)  # [NT, BO]
    b = tl.sum(tl.sum(acc_u, axis=3), axis=2)
    y = (a / (1.0 + tl.exp(-a)) * b).to(y_ptr.dtype.element_ty)
    m = (tok < N)[:, None] & (rows < OUT)[None, :]
    tl.store(y_ptr + tok[:, None] * stride_yn + rows[None, :], y, mask=m)
    if QOUT:  # token t's block i is block t * OUT / 32 + i of the contiguous [N, OUT / 32] outputs
        yv = tl.reshape(y.to(tl.float32), (NT, 8, 4))
        store_quant32(yv, yq_ptr, ys_ptr, tok * (OUT // 32) + tl.program_id(0), tok < N)


def gemv_i8(xq: torch.Tensor, xs: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
            qtype: int, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
            dtype: torch.dtype = torch.bfloat16, launch: tuple | None = None,
            split: bool = False) -> torch.Tensor:
    """y [N, out] = x @ W.T for x from quantize_x (xq [N, K / 4], xs [N, K / 32, 4]) and W raw Q4_K (12)
    or Q6_K (14) [out, row_bytes]; + bias; residual [N, out]: added into it in place and returned.
    launch: (G, BO, warps[, NT[, K splits]]) instead of I8_LAUNCH's (and i8_splits'). split: W is Q6_K in
    layout.split_q6_k's layout."""
    qt = int(qtype)
    if split and qt != 14:
        raise ValueError(f"the split layout is Q6_K's (14), not type {qt}")
    n = xq.shape[0]
    y = residual if residual is not None else torch.empty((n, out_features), dtype=dtype, device=xq.device)
    g, bo, warps, nt = i8_launch(qt, n, launch[:4] if launch else None)
    group = 64 if qt == 12 else 128  # inputs per group: a Q4_K chunk, a Q6_K half block
    g = min(g, triton.next_power_of_2(triton.cdiv(in_features, group)))
    grid = (triton.cdiv(out_features, bo), triton.cdiv(n, nt))
    passes = triton.cdiv(in_features, g * group)
    if launch and len(launch) > 4:
        splits = launch[4]
    else:
        splits = i8_splits(qt, n, in_features, grid[0] * grid[1], passes)
    cnt = split_counters(xq.device, grid[0] * grid[1]) if splits > 1 else None
    splits = splits if cnt is not None else 1  # capturing before the counters exist: no split
    ws = torch.empty((splits, n, out_features), dtype=torch.float32, device=xq.device) if splits > 1 else None
    row_bytes = in_features // 256 * (144 if qt == 12 else 210)
    _gemv_i8_kernel[(*grid, splits)](
        xq, xs, *(q6k_views(raw) if split else _views(raw, qt)), y, n, out_features, in_features, row_bytes,
        y.stride(0), bias, QT=qt, G=g, BO=bo, NT=nt, ASM=asm_ok(xq.device), HAS_BIAS=bias is not None,
        RES=residual is not None, SPLIT=split, ws_ptr=ws, cnt_ptr=cnt, S=splits, num_warps=warps,
        **launch_opts(xq.device))
    return y


def glu_q4k_i8(xq: torch.Tensor, xs: torch.Tensor, raw_gate: torch.Tensor, raw_up: torch.Tensor,
               out_features: int, in_features: int, dtype: torch.dtype = torch.bfloat16,
               quant_out: bool = True, launch: tuple | None = None):
    """silu(x @ Wg.T) * (x @ Wu.T) -> (y [N, out] in dtype, and with quant_out y as quantize_x gives it:
    yq, ys, else None, None); out % 32 == 0, both weights raw Q4_K."""
    n = xq.shape[0]
    if out_features % 32:
        raise ValueError("the SwiGLU int8 kernel needs out_features % 32 == 0")
    dev = xq.device
    g, bo, warps, nt = i8_launch("glu", n, launch)
    g = min(g, triton.next_power_of_2(triton.cdiv(in_features, 64)))
    qout = quant_out and bo == 32
    y = torch.empty((n, out_features), dtype=dtype, device=dev)
    yq = torch.empty((n, out_features // 4), dtype=torch.int32, device=dev) if qout else None
    ys = torch.empty((n, out_features // 32, 4), dtype=torch.float32, device=dev) if qout else None
    _glu_i8_kernel[(triton.cdiv(out_features, bo), triton.cdiv(n, nt))](
        xq, xs, _views(raw_gate, 12)[2], _views(raw_up, 12)[2], y, yq, ys, n, out_features, in_features,
        in_features // 256 * 144, y.stride(0), G=g, BO=bo, NT=nt, ASM=asm_ok(dev), QOUT=qout,
        num_warps=warps, **launch_opts(dev))
    if quant_out and not qout:
        yq, ys = quantize_x(y)
    return y, yq, ys
