"""The MoE router's top-k and softmax in one launch (gpt-oss), and for the fused decode step the whole
route in one launch: RMSNorm of the residual, the router GEMV (+ bias), top-k and softmax.

topk_softmax: from the router's logits [T, E] (the linear stays the model's own, cuBLAS or the
batch-invariant kernel), each token's top-k experts and the softmax over those k logits, in fp32.
norm_route: from the residual [T, H] (optionally after `residual += delta`), h = RMSNorm(residual) * w
(written: the experts read it), logits = h @ W_r.T + b_r rounded to the model dtype as the eager
F.linear's are, then the same top-k and softmax; with quant=True it also writes h quantized per 32
(xquant.quantize_x's words and scales, bit for bit: the int8 MoE's input, one launch fewer). One
program per token in both (a token's result never depends on the batch); the router is small
(gpt-oss-20b: 32 x 2880), one program reads all of it.

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
def _norm_route_kernel(d_ptr, r_ptr, nw_ptr, h_ptr, w_ptr, b_ptr, ids_ptr, rw_ptr, hq_ptr, hs_ptr, H, E, eps,
                       HAS_ADD: tl.constexpr, TOP_K: tl.constexpr, EP: tl.constexpr, KP: tl.constexpr,
                       BH: tl.constexpr, BK: tl.constexpr, QUANT: tl.constexpr = 0, PDL: tl.constexpr = 0):
    if PDL:  # launched early: wait for the residual, then let the next kernel (the expert GEMV) launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BH)
    m = offs < H
    r = tl.load(r_ptr + t * H + offs, mask=m, other=0.0)
    if HAS_ADD:  # residual += delta, rounded to the residual's dtype (as `x = x + f(x)`)
        r = (r.to(tl.float32) + tl.load(d_ptr + t * H + offs, mask=m, other=0.0).to(tl.float32)).to(r.dtype)
        tl.store(r_ptr + t * H + offs, r, mask=m)
    xf = r.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / H + eps)
    xn = (xf * rstd).to(r.dtype).to(tl.float32)  # rounded as the eager RMSNorm
    nw = tl.load(nw_ptr + offs, mask=m, other=0.0).to(tl.float32)
    h_out = (xn * nw).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + t * H + offs, h_out, mask=m)
    if QUANT:  # h as quantize_x(h) reads it: [BH / 32] blocks of 32 (zeros past H), those below H / 32 stored
        blk = tl.arange(0, BH // 32)
        store_quant32(tl.reshape(h_out.to(tl.float32), (BH // 32, 8, 4)), hq_ptr + t * (H // 4),
                      hs_ptr + t * (H // 8), blk, blk < H // 32)
    tl.debug_barrier()  # h is read back below by other threads of this program
    e = tl.arange(0, EP)
    emask = e < E
    acc = tl.zeros([EP, BK], dtype=tl.float32)
    kb = tl.arange(0, BK)
    for k0 in range(0, H, BK):  # logits[e] = h . W_r[e] (h from L1/L2, rounded to the model dtype)
        km = (k0 + kb) < H
        hv = tl.load(h_ptr + t * H + k0 + kb, mask=km, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + e[:, None] * H + k0 + kb[None, :], mask=emask[:, None] & km[None, :], other=0.0)
        acc += w.to(tl.float32) * hv[None, :]
    logits = tl.sum(acc, axis=1) + tl.load(b_ptr + e, mask=emask, other=0.0).to(tl.float32)
    logits = logits.to(h_ptr.dtype.element_ty).to(tl.float32)  # the eager linear's output dtype
    logits = tl.where(emask, logits, float("-inf"))
    _topk_softmax(logits, e, t, ids_ptr, rw_ptr, E, TOP_K, EP, KP)


def norm_route(residual: torch.Tensor, norm_w: torch.Tensor, eps: float, router_w: torch.Tensor,
               router_b: torch.Tensor, top_k: int, delta: torch.Tensor | None = None, quant: bool = False
               ) -> tuple:
    """residual [T, H] (+= delta [T, H] in place when given), norm_w [H], router_w [E, H], router_b [E]
    -> (h = RMSNorm(residual) * norm_w [T, H] in residual's dtype, ids [T, k] int64, weights [T, k] fp32),
    and with quant=True a fourth item, quantize_x(h): (words int32 [T, H / 4], scales fp32 [T, H / 32, 4])."""
    t, hid = residual.shape
    if quant and hid % 32:
        raise ValueError(f"H = {hid} is not a multiple of 32")
    n_exp = router_w.shape[0]
    h = torch.empty_like(residual)
    ids = torch.empty((t, top_k), dtype=torch.int64, device=residual.device)
    rw = torch.empty((t, top_k), dtype=torch.float32, device=residual.device)
    hq = torch.empty((t, hid // 4), dtype=torch.int32, device=residual.device) if quant else h
    hs = torch.empty((t, hid // 32, 4), dtype=torch.float32, device=residual.device) if quant else h
    _norm_route_kernel[(t,)](delta if delta is not None else residual, residual, norm_w, h,
                             router_w.contiguous(), router_b, ids, rw, hq, hs, hid, n_exp, float(eps),
                             HAS_ADD=delta is not None, QUANT=int(quant), TOP_K=top_k,
                             EP=triton.next_power_of_2(n_exp),
                             KP=triton.next_power_of_2(top_k), BH=triton.next_power_of_2(hid), BK=128,
                             num_warps=8, **launch_opts(residual.device))
    return (h, ids, rw, (hq, hs)) if quant else (h, ids, rw)
