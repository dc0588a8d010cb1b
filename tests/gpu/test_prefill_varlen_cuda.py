"""CUDA varlen flash prefill (attention_triton._prefill_varlen) == the torch reference on the paged cache."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _case(ctx: list[int], new: list[int], dtype: torch.dtype, page: int = 16, n_heads: int = 14,
          n_kv: int = 2, dim: int = 64):
    """Sequence b has ctx[b] tokens in the cache, the last new[b] of them queried this step."""
    from orcd.models.layers.attention import AttnMetadata

    g = torch.Generator().manual_seed(sum(ctx) + len(ctx))
    width = max((c + page - 1) // page for c in ctx)
    num_blocks = len(ctx) * width + 5
    tables = torch.randperm(num_blocks, generator=g)[: len(ctx) * width].view(len(ctx), width).int()
    k_cache = torch.randn(num_blocks, page, n_kv, dim, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, page, n_kv, dim, generator=g).to(dtype)
    q = torch.randn(sum(new), n_heads, dim, generator=g).to(dtype)
    cu, slots = [0], []
    for b, (c, n) in enumerate(zip(ctx, new, strict=True)):
        cu.append(cu[-1] + n)
        slots += [int(tables[b, p // page]) * page + p % page for p in range(c - n, c)]
    dev = "cuda"
    meta = AttnMetadata(torch.tensor(cu, dtype=torch.int32, device=dev), torch.tensor(ctx, dtype=torch.int32,
                        device=dev), tables.to(dev), torch.tensor(slots, device=dev), max(new), max(ctx),
                        cu_seqlens_q_host=cu, seq_lens_host=list(ctx))
    return q.to(dev), k_cache.to(dev), v_cache.to(dev), meta


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("ctx,new", [
    ([128] * 16, [128] * 16),  # plain prefill
    ([512], [512]),
    ([37, 200, 5], [37, 200, 5]),
    ([100, 300, 17], [20, 300, 17]),  # chunk over a cached prefix
    ([64, 90, 300, 33], [1, 90, 1, 10]),  # mixed: decode rows and prefill chunks
])
def test_varlen_matches_reference(ctx, new, dtype):
    from orcd.models.layers.attention import paged_attention_torch
    from orcd.models.layers.attention_triton import paged_attention

    q, kc, vc, meta = _case(ctx, new, dtype)
    out = paged_attention(q, kc, vc, meta, 0.125)
    assert meta.cache is not None and "kv_index" in meta.cache  # the varlen path ran
    ref = paged_attention_torch(q.float(), kc.float(), vc.float(), meta, 0.125)
    err = (out.float() - ref).abs().max().item()
    assert out.dtype == dtype and out.shape == q.shape and err < 2e-2, err
