"""Split-K paged decode attention vs a dense float64 reference, on CUDA."""

from __future__ import annotations

import pytest
import torch
from attn_ref import dense_reference, random_paged_case

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("seq_lens", [[1], [7, 1, 64, 65], [4096], [300, 2000, 17, 4097]])
@pytest.mark.parametrize("heads", [(14, 2), (8, 8), (32, 4)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_decode_matches_dense(seq_lens, heads, dtype, num_splits):
    from orcd.models.layers.attention_triton import paged_decode_attention

    n_heads, n_kv = heads
    q, k, v, tables, sl = random_paged_case(seq_lens, n_heads, n_kv, 64, 16, dtype, "cuda", len(seq_lens))
    out = paged_decode_attention(q, k, v, tables, sl, 0.125, num_splits=num_splits)
    ref = dense_reference(q, k, v, tables, sl, 0.125)
    err = float((out.double().cpu() - ref).norm() / ref.norm())
    assert torch.isfinite(out).all() and err < TOL[dtype]


def test_head_dim_128_page_32():
    from orcd.models.layers.attention_triton import paged_decode_attention

    q, k, v, tables, sl = random_paged_case([33, 1000], 28, 4, 128, 32, torch.bfloat16, "cuda", seed=3)
    out = paged_decode_attention(q, k, v, tables, sl, 128**-0.5)
    ref = dense_reference(q, k, v, tables, sl, 128**-0.5)
    assert float((out.double().cpu() - ref).norm() / ref.norm()) < 2e-2
