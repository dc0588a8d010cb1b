"""Compile cases of the attention kernels and the small per-layer kernels around them (bf16): qwen2.5-7B's
decode attention through decode_products.attend (RoPE + KV write + split-K attention: 16 splits at 1
row), Gemma 3 270M's layer pieces (QK-norm + RoPE + KV write, D 256 sliding-window attention, norm_add
with and without the next norm, gelu_mul), quant=True at one split, the batch-invariant attention over a
prefill of two sequences. EXTENDED: 8 qwen rows (4 splits), Gemma's global layers, float32 (IEEE dots)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_invariant import paged_attention_invariant
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.quant.kernels.norm_ops import gelu_mul, norm_add, qk_norm_rope_kv
from orcd.runner.decode_products import attend

PAGE, BLOCKS = 16, 64
BF16 = torch.bfloat16


def meta(rows: int) -> AttnMetadata:
    """A decode step of `rows` sequences, block tables BLOCKS pages wide (1,024 tokens)."""
    return AttnMetadata(cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32),
                        seq_lens=torch.ones(rows, dtype=torch.int32),
                        block_tables=torch.zeros(rows, BLOCKS, dtype=torch.int32),
                        slot_mapping=torch.zeros(rows, dtype=torch.int64), max_query_len=1, max_seq_len=1)


def cache(kv_heads: int, d: int, dtype=BF16) -> torch.Tensor:
    return torch.zeros(BLOCKS, PAGE, kv_heads, d, dtype=dtype)


def qwen_attention(rows: tuple = (1,)) -> None:
    """qwen2.5-7B: 28 query heads, 4 KV heads, D 128 (1 row: 16 splits, 8 rows: 4), o plain and quantized."""
    a = SimpleNamespace(n_heads=28, n_kv_heads=4, head_dim=128, scale=128 ** -0.5)
    kc = cache(4, 128)
    for n in rows:
        for quant in (False, True):  # True: o quantized by the split merge (the int8 o GEMV's x)
            attend(a, torch.zeros(n, 28 * 128, dtype=BF16), torch.zeros(n, 512, dtype=BF16),
                   torch.zeros(n, 512, dtype=BF16), torch.zeros(n, dtype=torch.int64), torch.zeros(64),
                   kc, kc, meta(n), quant=quant)


def gemma3_layer(windows: tuple = (512,)) -> None:
    """Gemma 3 270M: H 640, 4 query heads, 1 KV head, D 256, sliding window 512; FFN 2048."""
    rows, hid, d = 1, 640, 256
    q, k = torch.zeros(rows, 4, d, dtype=BF16), torch.zeros(rows, 1, d, dtype=BF16)
    kc, m = cache(1, d), meta(rows)
    qk_norm_rope_kv(q, k, k.clone(), (torch.zeros(d, dtype=BF16), 1e-6), torch.zeros(d, dtype=BF16),
                    torch.zeros(rows, dtype=torch.int64), torch.zeros(d // 2), kc, kc, m.slot_mapping)
    for window in windows:
        paged_decode_attention(q, kc, kc, m.block_tables, m.seq_lens, d ** -0.5, window=window)
    res, w = torch.zeros(rows, hid, dtype=BF16), torch.zeros(hid, dtype=BF16)
    norm_add(res.clone(), res, w, 1e-6)
    norm_add(res.clone(), res, w, 1e-6, next_weight=w)
    gelu_mul(torch.zeros(rows, 2048, dtype=BF16), torch.zeros(rows, 2048, dtype=BF16))


def attention_variants(dtypes: tuple = (BF16,)) -> None:
    """quant=True at one split (quantize_x); the batch-invariant kernel over a prefill of two sequences
    (5 and 20 tokens) in `dtypes`; float32 decode attention (IEEE dots, D 64, sinks) with float32 there."""
    m = meta(2)
    paged_decode_attention(torch.zeros(2, 64, 64, dtype=BF16), cache(8, 64), cache(8, 64), m.block_tables,
                           m.seq_lens, 0.125, num_splits=1, sinks=torch.zeros(64), quant=True)
    lens = torch.tensor([5, 20], dtype=torch.int32)
    pre = AttnMetadata(cu_seqlens_q=torch.tensor([0, 5, 25], dtype=torch.int32), seq_lens=lens,
                       block_tables=torch.zeros(2, BLOCKS, dtype=torch.int32),
                       slot_mapping=torch.zeros(25, dtype=torch.int64), max_query_len=20, max_seq_len=20)
    for dtype in dtypes:
        paged_attention_invariant(torch.zeros(25, 28, 128, dtype=dtype), cache(4, 128, dtype),
                                  cache(4, 128, dtype), pre, 128 ** -0.5, window=0)
        if dtype == torch.float32:
            kc = cache(8, 64, dtype)
            paged_decode_attention(torch.zeros(2, 64, 64), kc, kc, m.block_tables, m.seq_lens, 0.125,
                                   sinks=torch.zeros(64))


def attention() -> None:
    qwen_attention()
    gemma3_layer()
    attention_variants()


CORE = {"attention": attention}
EXTENDED = {"attention_more": lambda: (qwen_attention((8,)), gemma3_layer((0,)),
                                       attention_variants((torch.float32,)))}
