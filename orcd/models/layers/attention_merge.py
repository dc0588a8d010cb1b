"""The split-K decode attention's merge: each split's partial output [D] and log-sum-exp, per query head,
combined by log-sum-exp (+ the head's sink logit, gpt-oss), optionally quantized for an int8 GEMV.

Two callers (attention_triton.py): the merge kernel (one program per (sequence, head)), and the split
kernel's tail, where the last program of a (sequence, KV head) to finish merges the GROUP heads that share
it (an arrival counter per (sequence, KV head), reset after use): one launch a layer instead of two.
Only the splits that hold keys are read there (the others are empty: weight 0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.xquant import store_quant32


@triton.jit
def merge_head(op_ptr, lse_ptr, out_ptr, sink_ptr, xq_ptr, xs_ptr, bh, n_heads, used, SPLITS: tl.constexpr,
               SP2: tl.constexpr, D: tl.constexpr, SINK: tl.constexpr, QUANT: tl.constexpr):
    """out[bh] (bh = b * Hq + h) <- the merge of its first `used` splits (partials [B, Hq, SPLITS, D] at
    op_ptr, lse [B, Hq, SPLITS]); QUANT: also its D / 32 blocks as quantize_x writes them. Loads bypass
    L1 (.cg): in the split kernel's tail the partials were written by other programs."""
    sp = tl.arange(0, SP2)
    d = tl.arange(0, D)
    valid = sp < used
    lse = tl.load(lse_ptr + bh * SPLITS + sp, mask=valid, other=float("-inf"), cache_modifier=".cg")
    m = tl.max(lse, axis=0)
    if SINK:  # sinks [Hq]: one more logit in the denominator, with no value
        sk = tl.load(sink_ptr + bh % n_heads).to(tl.float32)
        m = tl.maximum(m, sk)
    w = tl.exp(lse - m)  # empty splits weigh 0
    o = tl.load(op_ptr + (bh * SPLITS + sp)[:, None] * D + d[None, :], mask=valid[:, None], other=0.0,
                cache_modifier=".cg")
    den = tl.sum(w, axis=0)
    if SINK:
        den += tl.exp(sk - m)
    out = tl.sum(o * w[:, None], axis=0) / den
    tl.store(out_ptr + bh * D + d, out.to(out_ptr.dtype.element_ty))
    if QUANT:  # the head's D outputs (D / 32 whole blocks of the row b) as quantize_x(out) writes them
        xr = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        blk = tl.arange(0, D // 32)
        store_quant32(tl.reshape(xr, (D // 32, 8, 4)), xq_ptr + bh * (D // 4), xs_ptr + bh * (D // 8), blk,
                      blk < D // 32)


_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def merge_counters(k_cache: torch.Tensor, size: int) -> torch.Tensor | None:
    """Zeroed int32 arrival counters [>= size] for the split kernel's merging tail, one buffer per KV
    cache (so engines or layers running at once never share one; each kernel resets the counters it
    used), made outside any CUDA-graph capture; None while capturing before one of that size exists
    (the caller then launches the merge kernel)."""
    key = (k_cache.device, k_cache.data_ptr())
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < size:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return None
        buf = _COUNTERS[key] = torch.zeros(max(size, 1024), dtype=torch.int32, device=k_cache.device)
    return buf
