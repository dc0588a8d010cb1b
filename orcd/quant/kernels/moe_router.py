"""The MoE router in one launch (gpt-oss): logits = x @ W.T + b, each token's top-k experts, softmax over
those k logits. One program per token (a token's result never depends on the batch).

Replaces the eager linear, bias, topk, softmax and the weights' float cast (~5 launches a layer). The
logits are summed in fp32 and rounded to x's dtype before the top-k, as the eager bf16 linear rounds them;
the softmax is computed in fp32 on those rounded logits. Ties go to the lower expert index.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _router_kernel(x_ptr, w_ptr, b_ptr, ids_ptr, rw_ptr, H, E, HAS_BIAS: tl.constexpr, TOP_K: tl.constexpr,
                   EP: tl.constexpr, KP: tl.constexpr, BH: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    emask = e < E
    acc = tl.zeros([EP, BH], dtype=tl.float32)
    for h0 in range(0, H, BH):
        h = h0 + tl.arange(0, BH)
        hm = h < H
        x = tl.load(x_ptr + t * H + h, mask=hm, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + e[:, None] * H + h[None, :], mask=emask[:, None] & hm[None, :], other=0.0)
        acc += w.to(tl.float32) * x[None, :]
    logits = tl.sum(acc, axis=1)  # [EP]
    if HAS_BIAS:
        logits += tl.load(b_ptr + e, mask=emask, other=0.0).to(tl.float32)
    logits = logits.to(x_ptr.dtype.element_ty).to(tl.float32)  # the eager linear's rounding
    logits = tl.where(emask, logits, float("-inf"))
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


def route_topk(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H]; weight [E, H], bias [E] or None -> (ids [T, k] int64 by descending logit, routing
    weights [T, k] float32 summing to 1 per token)."""
    t, h = x.shape
    n_exp = weight.shape[0]
    ids = torch.empty((t, top_k), dtype=torch.int64, device=x.device)
    rw = torch.empty((t, top_k), dtype=torch.float32, device=x.device)
    ep = triton.next_power_of_2(n_exp)
    bh = max(16, min(triton.next_power_of_2(h), 4096 // ep))  # an [EP, BH] fp32 tile of <= 4096 elements
    _router_kernel[(t,)](x.contiguous(), weight, bias if bias is not None else weight, ids, rw, h, n_exp,
                         HAS_BIAS=bias is not None, TOP_K=top_k, EP=ep, KP=triton.next_power_of_2(top_k),
                         BH=bh, num_warps=4)
    return ids, rw
