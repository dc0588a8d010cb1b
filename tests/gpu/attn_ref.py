"""Random paged KV caches and a dense float64 reference for one-query-per-sequence attention."""

from __future__ import annotations

import torch


def random_paged_case(seq_lens: list[int], n_heads: int, n_kv: int, dim: int, page: int,
                      dtype: torch.dtype, device: str, seed: int):
    """-> q [B, Hq, D], k_cache, v_cache [num_blocks, page, Hkv, D], block_tables [B, max_blocks] int32,
    seq_lens [B] int32. Blocks are a random permutation, so tables are not in order."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max((s + page - 1) // page for s in seq_lens) + 1
    num_blocks = len(seq_lens) * max_blocks + 3
    perm = torch.randperm(num_blocks, generator=g)
    tables = perm[: len(seq_lens) * max_blocks].view(len(seq_lens), max_blocks).to(torch.int32)
    k = torch.randn(num_blocks, page, n_kv, dim, generator=g)
    v = torch.randn(num_blocks, page, n_kv, dim, generator=g)
    q = torch.randn(len(seq_lens), n_heads, dim, generator=g)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    return (q.to(device, dtype), k.to(device, dtype), v.to(device, dtype), tables.to(device), sl.to(device))


def dense_reference(q, k_cache, v_cache, tables, seq_lens, scale):
    """float64 softmax(q k^T * scale) v per sequence, GQA by repeating KV heads."""
    out = []
    page, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // n_kv
    for b, n in enumerate(seq_lens.tolist()):
        blocks = tables[b, : (n + page - 1) // page].long().cpu()
        k = k_cache.cpu().double()[blocks].flatten(0, 1)[:n].repeat_interleave(group, dim=1)  # [n, Hq, D]
        v = v_cache.cpu().double()[blocks].flatten(0, 1)[:n].repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].cpu().double(), k) * scale
        out.append(torch.einsum("hn,nhd->hd", s.softmax(-1), v))
    return torch.stack(out)
