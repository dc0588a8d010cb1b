"""The paged-attention contract (AttnMetadata, write_kv) and its torch reference implementation.

A step's tokens are flattened: sequence b owns query rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of every
[T, ...] tensor. Its K/V live in blocks of the cache; block_tables[b, j] is the physical block holding
its positions [j * block_size, (j + 1) * block_size). New K/V are written at slot_mapping first, then
each query attends to its sequence's cached context, causally: the query at position p sees keys 0..p,
or with a sliding window w > 0 only keys p - w + 1 .. p (the last w positions, itself included).

The backends (attention_triton, attention_invariant) import from here, never from attention.py, which
dispatches to them: no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttnMetadata:
    cu_seqlens_q: torch.Tensor  # [B+1] int32: query row offsets per sequence
    seq_lens: torch.Tensor  # [B] int32: tokens in the cache after this step (context + new)
    block_tables: torch.Tensor  # [B, max_blocks] int32, padded with 0
    slot_mapping: torch.Tensor  # [T] int64: block * block_size + offset where token t's K/V goes
    max_query_len: int
    max_seq_len: int
    # Host copies of cu_seqlens_q / seq_lens, so the torch path slices without device syncs.
    cu_seqlens_q_host: list[int] | None = None
    seq_lens_host: list[int] | None = None
    # Per-step memo of backends (e.g. the CUDA varlen path's K/V gather index), shared by every layer.
    cache: dict | None = None

    def host_lists(self) -> tuple[list[int], list[int]]:
        cu = self.cu_seqlens_q_host if self.cu_seqlens_q_host is not None else self.cu_seqlens_q.tolist()
        sl = self.seq_lens_host if self.seq_lens_host is not None else self.seq_lens.tolist()
        return cu, sl


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k, v [T, n_kv, D] -> cache slots; caches are [num_blocks, block_size, n_kv, D]."""
    nb, bs = k_cache.shape[:2]
    k_cache.view(nb * bs, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(nb * bs, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          meta: AttnMetadata, scale: float, window: int = 0,
                          sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, Hq, D] (new tokens, K/V already written) -> out [T, Hq, D]. One SDPA per sequence.
    window > 0: each query sees only the last `window` positions (sliding-window layers).
    sinks [Hq] (gpt-oss): a learned logit per head added to the softmax denominator only."""
    cu, seq_lens = meta.host_lists()
    bs, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // n_kv
    out = torch.empty_like(q)
    for b, ctx in enumerate(seq_lens):
        q0, q1 = cu[b], cu[b + 1]
        if q1 == q0:
            continue
        n_q = q1 - q0
        lo = max(0, ctx - n_q - window + 1) if window > 0 else 0  # first key any of these queries sees
        n_blocks = (ctx + bs - 1) // bs
        blocks = meta.block_tables[b, lo // bs : n_blocks].long()
        off = lo - lo // bs * bs
        k = k_cache[blocks].flatten(0, 1)[off : off + ctx - lo].transpose(0, 1)  # [n_kv, ctx - lo, D]
        v = v_cache[blocks].flatten(0, 1)[off : off + ctx - lo].transpose(0, 1)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        mask = None  # a single query (decode) sees every key from lo on
        if n_q > 1:  # query i sits at position ctx - n_q + i and sees keys lo .. ctx - n_q + i
            qpos = torch.arange(ctx - n_q, ctx, device=q.device)[:, None]
            kpos = torch.arange(lo, ctx, device=q.device)[None, :]
            mask = kpos <= qpos  # [n_q, ctx - lo] bool
            if window > 0:
                mask &= kpos > qpos - window
        if sinks is not None:
            k, v, mask = _with_sink(k, v, mask, sinks, n_q, q.dtype)
        o = F.scaled_dot_product_attention(q[q0:q1].transpose(0, 1), k, v, attn_mask=mask, scale=scale)
        out[q0:q1] = o.transpose(0, 1)  # o: [Hq, n_q, D]
    return out


def _with_sink(k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, sinks: torch.Tensor, n_q: int,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One more key per head, of value 0, whose logit is sinks[h]: a zero key (score 0) plus an additive
    mask of sinks[h] on its column. k, v [Hq, L, D]; mask [n_q, L] bool or None -> float [Hq, n_q, L + 1]."""
    hq, n_k = k.shape[0], k.shape[1]
    zero = k.new_zeros(hq, 1, k.shape[2])
    bias = torch.zeros(hq, n_q, n_k, dtype=dtype, device=k.device)
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    sink = sinks.to(dtype).reshape(hq, 1, 1).expand(hq, n_q, 1)
    return torch.cat((k, zero), dim=1), torch.cat((v, zero), dim=1), torch.cat((bias, sink), dim=2)
