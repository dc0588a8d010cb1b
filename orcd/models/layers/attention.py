"""Attention over a paged KV cache for a flattened batch of variable-length sequences.

The contract (AttnMetadata, write_kv, the meaning of a sliding window) and the torch reference live in
`attention_ref.py`. `paged_attention` picks a backend: on CUDA the Triton kernels of
`attention_triton.py` (or `attention_invariant.py` in batch-invariant mode), else the torch reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from orcd.models.layers.attention_ref import AttnMetadata, paged_attention_torch, write_kv
from orcd.models.layers.rotary import apply_rotary

__all__ = ["Attention", "AttnMetadata", "paged_attention", "paged_attention_torch", "write_kv"]

AttentionFn = Callable[..., torch.Tensor]  # (q, k_cache, v_cache, meta, scale, window) -> out
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
                    scale: float, window: int = 0, invariant: bool = False,
                    sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Dispatch: the Triton kernel on CUDA when available, else the torch reference; on CUDA with
    `invariant` (orcd.numerics) the batch-invariant Triton kernel, for every kind of step.
    window > 0: sliding-window attention over the last `window` positions.
    sinks [Hq] (gpt-oss attention sinks): the Triton backend takes them; the batch-invariant kernel does
    not: invariant decode-only steps with sinks run the decode kernel unsplit (one program per sequence
    and KV head, so a row does not depend on its batch, and the step stays capturable), other invariant
    steps the torch reference."""
    if sinks is not None:
        return _with_sinks(q, k_cache, v_cache, meta, scale, window, invariant, sinks)
    if invariant and q.is_cuda:
        from orcd.models.layers.attention_invariant import paged_attention_invariant

        return paged_attention_invariant(q, k_cache, v_cache, meta, scale, window)
    kernel = _cuda_kernel() if q.is_cuda else None
    return (kernel or paged_attention_torch)(q, k_cache, v_cache, meta, scale, window)


def _with_sinks(q, k_cache, v_cache, meta, scale, window, invariant, sinks):
    kernel = _cuda_kernel() if q.is_cuda else None
    if kernel is None:
        return paged_attention_torch(q, k_cache, v_cache, meta, scale, window, sinks)
    if not invariant:
        return kernel(q, k_cache, v_cache, meta, scale, window, sinks)
    if meta.max_query_len == 1 and q.shape[0] == meta.seq_lens.shape[0]:
        from orcd.models.layers.attention_triton import paged_decode_attention

        return paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale, 1, window,
                                      sinks).to(q.dtype)
    return paged_attention_torch(q, k_cache, v_cache, meta, scale, window, sinks)


class Attention(nn.Module):
    """GQA self-attention with rotary positions over the paged cache.

    Optional: q_norm / k_norm (RMSNorm over head_dim before RoPE: qwen3, gemma3), scale (default
    head_dim ** -0.5), window (sliding-window layers; 0 = full causal attention), sinks ([n_heads]
    learned logits in each head's softmax denominator: gpt-oss)."""

    batch_invariant = False  # on CUDA, the batch-invariant kernel (orcd.numerics.batch_invariant_mode)

    def __init__(self, q_proj: nn.Module, k_proj: nn.Module, v_proj: nn.Module, o_proj: nn.Module,
                 n_heads: int, n_kv_heads: int, head_dim: int, *, q_norm: nn.Module | None = None,
                 k_norm: nn.Module | None = None, scale: float | None = None, window: int = 0,
                 sinks: torch.Tensor | None = None):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.q_norm, self.k_norm = q_norm, k_norm
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.scale = head_dim**-0.5 if scale is None else scale
        self.window = window
        self.register_buffer("sinks", sinks, persistent=False)  # [n_heads] float32, or None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttnMetadata,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]; writes this step's K/V into the caches."""
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if cos is not None:  # None: no rotary positions (gpt2's are learned, added to the embeddings)
            qk = apply_rotary(torch.cat((q, k), dim=1), cos, sin)  # one pass for both (elementwise)
            q, k = qk[:, : self.n_heads], qk[:, self.n_heads :]
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        o = paged_attention(q, k_cache, v_cache, meta, self.scale, self.window, self.batch_invariant,
                            self.sinks)
        return self.o_proj(o.reshape(t, self.n_heads * self.head_dim))
