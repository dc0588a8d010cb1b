"""The MoE router's top-k and softmax in one launch (gpt-oss): from the router's logits [T, E] (the linear
stays the model's own, cuBLAS or the batch-invariant kernel), each token's top-k experts and the softmax
over those k logits, in fp32. One program per token (a token's result never depends on the batch).

Replaces torch.topk (two kernels on CUDA), softmax and the weights' float cast. Ties go to the lower
expert index (torch's order among ties is unspecified).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _topk_softmax_kernel(l_ptr, ids_ptr, rw_ptr, E, TOP_K: tl.constexpr, EP: tl.constexpr, KP: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    emask = e < E
    logits = tl.load(l_ptr + t * E + e, mask=emask, other=float("-inf")).to(tl.float32)
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


def topk_softmax(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (ids [T, k] int64 by descending logit, routing weights [T, k] float32 summing to 1
    per token)."""
    t, n_exp = logits.shape
    ids = torch.empty((t, top_k), dtype=torch.int64, device=logits.device)
    rw = torch.empty((t, top_k), dtype=torch.float32, device=logits.device)
    ep, kp = triton.next_power_of_2(n_exp), triton.next_power_of_2(top_k)
    _topk_softmax_kernel[(t,)](logits.contiguous(), ids, rw, n_exp, TOP_K=top_k, EP=ep, KP=kp, num_warps=1)
    return ids, rw
