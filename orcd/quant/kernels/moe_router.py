"""The MoE router's top-k and softmax in one launch (gpt-oss), and for the fused decode step the whole
route in one launch: RMSNorm of the residual, the router GEMV (+ bias), top-k and softmax.

topk_softmax: from the router's logits [T, E] (the linear stays the model's own, cuBLAS or the
batch-invariant kernel), each token's top-k experts and the softmax over those k logits, in fp32.
norm_route: from the residual [T, H] (optionally after `residual += delta`), h = RMSNorm(residual) * w
(written: the experts read it), logits = h @ W_r.T + b_r rounded to the model dtype as the eager
F.linear's are, then the same top-k and softmax; with quant=True it also writes h quantized per 32
(xquant.quantize_x's words and scales, bit for bit: the int8 MoE's input, one launch fewer).
topk_softmax: one program per token. norm_route: one program per (token, expert), so the router
(gpt-oss-20b: 32 x 2880) is read by 32 programs at once, before the kernel ahead ends (PDL), where one
program looping over it took ~20 us; the token's last program to finish does the top-k (a counter per
token, left at zero). A token's result never depends on the batch.

Ties go to the lower expert index (torch's order among ties is unspecified).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import launch_opts
from orcd.quant.kernels.xquant import store_quant32


@triton.jit
def _topk_softmax(logits, e, t, ids_ptr, rw_ptr, E, TOP_K: tl.constexpr, EP: tl.constexpr, KP: tl.constexpr):
    """logits [EP] fp32 (-inf past E) of token t -> ids[t, :TOP_K] (descending), rw[t, :TOP_K]."""
    kk = tl.arange(0, KP)
    top = tl.full([KP], float("-inf"), dtype=tl.float32)
    for k in tl.static_range(TOP_K):  # k-th largest: the max, lowest index among equals
        m = tl.max(logits, axis=0)
        idx = tl.minimum(tl.min(tl.where(logits == m, e, EP), axis=0), E - 1)  # NaN logits: a valid id
        tl.store(ids_ptr + t * TOP_K + k, idx.to(tl.int64))
        top = tl.where(kk == k, m, top)
        logits = tl.where(e == idx, float("-inf"), logits)
    p = tl.exp(top - tl.max(top, axis=0))  # padding slots: exp(-inf) = 0
    tl.store(rw_ptr + t * TOP_K + kk, p / tl.sum(p, axis=0), mask=kk < TOP_K)


@triton.jit
def _topk_softmax_kernel(l_ptr, ids_ptr, rw_ptr, E, TOP_K: tl.constexpr, EP: tl.constexpr, KP: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    logits = tl.load(l_ptr + t * E + e, mask=e < E, other=float("-inf")).to(tl.float32)
    _topk_softmax(logits, e, t, ids_ptr, rw_ptr, E, TOP_K, EP, KP)


def topk_softmax(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (ids [T, k] int64 by descending logit, routing weights [T, k] float32 summing to 1
    per token)."""
    t, n_exp = logits.shape
    ids = torch.empty((t, top_k), dtype=torch.int64, device=logits.device)
    rw = torch.empty((t, top_k), dtype=torch.float32, device=logits.device)
    ep, kp = triton.next_power_of_2(n_exp), triton.next_power_of_2(top_k)
    _topk_softmax_kernel[(t,)](logits.contiguous(), ids, rw, n_exp, TOP_K=top_k, EP=ep, KP=kp, num_warps=1)
    return ids, rw


@triton.jit
def _norm_route_kernel(d_ptr, r_ptr, nw_ptr, h_ptr, w_ptr, b_ptr, l_ptr, cnt_ptr, ids_ptr, rw_ptr, hq_ptr,
                       hs_ptr, H, E, eps, HAS_ADD: tl.constexpr, TOP_K: tl.constexpr, EP: tl.constexpr,
                       KP: tl.constexpr, BH: tl.constexpr, QUANT: tl.constexpr = 0, PDL: tl.constexpr = 0):
    """Program (t, e): token t's logit for expert e; the token's last program to finish (cnt_ptr[t]
    counts them, then is reset to 0) does the top-k and writes the residual, h and hq."""
    t = tl.program_id(0).to(tl.int64)
    e = tl.program_id(1)
    offs = tl.arange(0, BH)
    m = offs < H
    w = tl.load(w_ptr + e * H + offs, mask=m, other=0.0).to(tl.float32)  # router row e, read before the wait
    bias = tl.load(b_ptr + e).to(tl.float32)
    nw = tl.load(nw_ptr + offs, mask=m, other=0.0).to(tl.float32)
    if PDL:  # launched early: wait for the residual, then let the next kernel (the expert GEMV) launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    r = tl.load(r_ptr + t * H + offs, mask=m, other=0.0)
    if HAS_ADD:  # residual + delta, rounded to the residual's dtype (as `x = x + f(x)`); stored below
        r = (r.to(tl.float32) + tl.load(d_ptr + t * H + offs, mask=m, other=0.0).to(tl.float32)).to(r.dtype)
    xf = r.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / H + eps)
    xn = (xf * rstd).to(r.dtype).to(tl.float32)  # rounded as the eager RMSNorm
    h_out = (xn * nw).to(h_ptr.dtype.element_ty)
    logit = tl.sum(w * h_out.to(tl.float32), axis=0) + bias
    tl.store(l_ptr + t * EP + e, logit.to(h_ptr.dtype.element_ty).to(tl.float32))  # the eager linear's dtype
    tl.debug_barrier()  # every thread's reads and its store above come before the release below
    done = tl.atomic_add(cnt_ptr + t, 1, sem="acq_rel", scope="gpu")  # the logit above is visible to the last
    if done == E - 1:  # every program of token t has read the residual and stored its logit
        tl.store(cnt_ptr + t, 0)  # ready for the next launch (CUDA-graph replays reuse the counter)
        if HAS_ADD:
            tl.store(r_ptr + t * H + offs, r, mask=m)
        tl.store(h_ptr + t * H + offs, h_out, mask=m)
        if QUANT:  # h as quantize_x(h) reads it: [BH / 32] blocks of 32 (zeros past H), those below H / 32
            blk = tl.arange(0, BH // 32)
            store_quant32(tl.reshape(h_out.to(tl.float32), (BH // 32, 8, 4)), hq_ptr + t * (H // 4),
                          hs_ptr + t * (H // 8), blk, blk < H // 32)
        ee = tl.arange(0, EP)
        logits = tl.load(l_ptr + t * EP + ee, mask=ee < E, other=float("-inf"), cache_modifier=".cg")
        _topk_softmax(logits, ee, t, ids_ptr, rw_ptr, E, TOP_K, EP, KP)


def route_counter(rows: int, device: torch.device) -> torch.Tensor:
    """norm_route's per-token arrival counters for batches of up to `rows` tokens: zeros, and every launch
    leaves them zero, so one buffer serves every layer and every CUDA-graph replay."""
    return torch.zeros(rows, dtype=torch.int32, device=device)


def norm_route(residual: torch.Tensor, norm_w: torch.Tensor, eps: float, router_w: torch.Tensor,
               router_b: torch.Tensor, top_k: int, delta: torch.Tensor | None = None, quant: bool = False,
               counter: torch.Tensor | None = None) -> tuple:
    """residual [T, H] (+= delta [T, H] in place when given), norm_w [H], router_w [E, H], router_b [E]
    -> (h = RMSNorm(residual) * norm_w [T, H] in residual's dtype, ids [T, k] int64, weights [T, k] fp32),
    and with quant=True a fourth item, quantize_x(h): (words int32 [T, H / 4], scales fp32 [T, H / 32, 4]).
    One program per (token, expert), each reading its router row before the previous kernel ends (PDL);
    counter: route_counter(>= T) (a new one per call when None; give one where the call is captured)."""
    t, hid = residual.shape
    if quant and hid % 32:
        raise ValueError(f"H = {hid} is not a multiple of 32")
    if counter is None:
        counter = route_counter(t, residual.device)
    if counter.numel() < t or counter.dtype != torch.int32:
        raise ValueError(f"counter: {t} int32 zeros needed, got {counter.numel()} {counter.dtype}")
    n_exp, ep = router_w.shape[0], triton.next_power_of_2(router_w.shape[0])
    h = torch.empty_like(residual)
    ids = torch.empty((t, top_k), dtype=torch.int64, device=residual.device)
    rw = torch.empty((t, top_k), dtype=torch.float32, device=residual.device)
    logits = torch.empty((t, ep), dtype=torch.float32, device=residual.device)
    hq = torch.empty((t, hid // 4), dtype=torch.int32, device=residual.device) if quant else h
    hs = torch.empty((t, hid // 32, 4), dtype=torch.float32, device=residual.device) if quant else h
    bh = triton.next_power_of_2(hid)
    _norm_route_kernel[(t, n_exp)](delta if delta is not None else residual, residual, norm_w, h,
                                   router_w.contiguous(), router_b, logits, counter, ids, rw, hq, hs, hid,
                                   n_exp, float(eps), HAS_ADD=delta is not None, QUANT=int(quant),
                                   TOP_K=top_k, EP=ep, KP=triton.next_power_of_2(top_k), BH=bh,
                                   num_warps=4 if bh <= 4096 else 8, **launch_opts(residual.device))
    return (h, ids, rw, (hq, hs)) if quant else (h, ids, rw)
