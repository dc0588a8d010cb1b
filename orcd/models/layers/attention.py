"""Attention over a paged KV cache for a flattened batch of variable-length sequences.

A step's tokens are flattened: sequence b owns query rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of every
[T, ...] tensor. Its K/V live in blocks of the cache; block_tables[b, j] is the physical block holding
its positions [j * block_size, (j + 1) * block_size). New K/V are written at slot_mapping first, then
each query attends to its sequence's cached context, causally: the query at position p sees keys 0..p.

Backends: `paged_attention` picks the Triton kernel from `attention_triton.py` on CUDA when that module
exists (same signature as `paged_attention_torch`), else the torch reference below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from orcd.models.layers.rotary import apply_rotary
from orcd.numerics import batch_invariant


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
                          meta: AttnMetadata, scale: float) -> torch.Tensor:
    """q [T, Hq, D] (new tokens, K/V already written) -> out [T, Hq, D]. One SDPA per sequence."""
    cu, seq_lens = meta.host_lists()
    bs, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // n_kv
    out = torch.empty_like(q)
    for b, ctx in enumerate(seq_lens):
        q0, q1 = cu[b], cu[b + 1]
        if q1 == q0:
            continue
        n_blocks = (ctx + bs - 1) // bs
        blocks = meta.block_tables[b, :n_blocks].long()
        k = k_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1)  # [n_kv, ctx, D]
        v = v_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        n_q = q1 - q0
        mask = None  # a single query (decode) sees the whole context
        if n_q > 1:  # query i sits at position ctx - n_q + i and sees keys 0 .. ctx - n_q + i
            qpos = torch.arange(ctx - n_q, ctx, device=q.device)[:, None]
            mask = torch.arange(ctx, device=q.device)[None, :] <= qpos  # [n_q, ctx] bool
        o = F.scaled_dot_product_attention(q[q0:q1].transpose(0, 1), k, v, attn_mask=mask, scale=scale)
        out[q0:q1] = o.transpose(0, 1)  # o: [Hq, n_q, D]
    return out


AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttnMetadata, float], torch.Tensor]
_cuda_backend: list[AttentionFn | None] = []  # memo: [] = not looked up yet


def _cuda_kernel() -> AttentionFn | None:
    if not _cuda_backend:
        try:
            from orcd.models.layers.attention_triton import paged_attention as kernel
        except ImportError:
            kernel = None
        _cuda_backend.append(kernel)
    return _cuda_backend[0]


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMetadata,
                    scale: float) -> torch.Tensor:
    """Dispatch: the Triton kernel on CUDA when available, else the torch reference; on CUDA in
    batch-invariant mode (orcd.numerics) the invariant Triton kernel, for every kind of step."""
    if batch_invariant() and q.is_cuda:
        from orcd.models.layers.attention_invariant import paged_attention_invariant

        return paged_attention_invariant(q, k_cache, v_cache, meta, scale)
    kernel = _cuda_kernel() if q.is_cuda else None
    return (kernel or paged_attention_torch)(q, k_cache, v_cache, meta, scale)


class Attention(nn.Module):
    """GQA self-attention with rotary positions over the paged cache."""

    def __init__(self, q_proj: nn.Module, k_proj: nn.Module, v_proj: nn.Module, o_proj: nn.Module,
                 n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.scale = head_dim**-0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttnMetadata,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]; writes this step's K/V into the caches."""
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.n_kv_heads, self.head_dim)
        qk = apply_rotary(torch.cat((q, k), dim=1), cos, sin)  # one rotary pass for both (elementwise)
        q, k = qk[:, : self.n_heads], qk[:, self.n_heads :]
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        o = paged_attention(q, k_cache, v_cache, meta, self.scale)
        return self.o_proj(o.reshape(t, self.n_heads * self.head_dim))
