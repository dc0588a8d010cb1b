"""Paged attention over a shuffled block cache == dense causal attention, for mixed batches."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from orcd.models.layers.attention import AttnMetadata, paged_attention, paged_attention_torch, write_kv
from orcd.models.layers.rotary import RotaryEmbedding, apply_rotary

N_HEADS, N_KV, D, BS, N_BLOCKS = 4, 2, 16, 4, 40


def dense_causal(q, k, v):
    """q [L, Hq, D], k/v [L, Hkv, D] for one whole sequence -> [L, Hq, D]."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                       is_causal=True, scale=D**-0.5)
    return o.transpose(0, 1)


def build_batch(specs, device, dtype, seed=0):
    """specs: (num_computed, n_new) per sequence -> full q/k/v per seq, caches holding the context, meta."""
    g = torch.Generator().manual_seed(seed)
    k_cache = torch.zeros(N_BLOCKS, BS, N_KV, D, dtype=dtype, device=device)
    v_cache = torch.zeros_like(k_cache)
    free = torch.randperm(N_BLOCKS, generator=g).tolist()  # non-contiguous blocks
    full, tables, slots, cu, seq_lens = [], [], [], [0], []
    for done, new in specs:
        total = done + new
        q, k, v = (torch.randn(total, h, D, generator=g).to(device, dtype) for h in (N_HEADS, N_KV, N_KV))
        blocks = [free.pop() for _ in range(math.ceil(total / BS))]
        slot = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(total)], device=device)
        write_kv(k[:done], v[:done], k_cache, v_cache, slot[:done])  # context cached in earlier steps
        full.append((q, k, v))
        tables.append(blocks)
        slots.append(slot[done:])
        cu.append(cu[-1] + new)
        seq_lens.append(total)
    width = max(map(len, tables))
    meta = AttnMetadata(
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32,
                                  device=device),
        slot_mapping=torch.cat(slots), max_query_len=max(n for _, n in specs), max_seq_len=max(seq_lens),
    )
    return full, k_cache, v_cache, meta


def write_new_tokens(full, specs, k_cache, v_cache, meta):
    """Write this step's K/V (as the model does) and return this step's queries [T, Hq, D]."""
    parts = [(q[d:], k[d:], v[d:]) for (q, k, v), (d, _) in zip(full, specs, strict=True)]
    q_new, k_new, v_new = (torch.cat(x) for x in zip(*parts, strict=True))
    write_kv(k_new, v_new, k_cache, v_cache, meta.slot_mapping)
    return q_new


MIXED = [(0, 7), (9, 5), (20, 1), (3, 1), (0, 1), (13, 3)]  # prefill, chunk, decodes, chunk


@pytest.mark.parametrize("specs", [MIXED, [(0, 11)], [(31, 1), (5, 1)]])
def test_paged_equals_dense(specs):
    full, k_cache, v_cache, meta = build_batch(specs, "cpu", torch.float32)
    q_new = write_new_tokens(full, specs, k_cache, v_cache, meta)
    out = paged_attention_torch(q_new, k_cache, v_cache, meta, D**-0.5)
    ref = torch.cat([dense_causal(q, k, v)[d:] for (q, k, v), (d, _) in zip(full, specs, strict=True)])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_sequence_result_does_not_depend_on_batch():
    full, k_cache, v_cache, meta = build_batch(MIXED, "cpu", torch.float32)
    q_new = write_new_tokens(full, MIXED, k_cache, v_cache, meta)
    batched = paged_attention(q_new, k_cache, v_cache, meta, D**-0.5)
    # sequence 1 alone, same blocks
    s0, s1 = int(meta.cu_seqlens_q[1]), int(meta.cu_seqlens_q[2])
    alone = AttnMetadata(torch.tensor([0, s1 - s0], dtype=torch.int32), meta.seq_lens[1:2],
                         meta.block_tables[1:2], meta.slot_mapping[s0:s1], s1 - s0, int(meta.seq_lens[1]))
    out = paged_attention(q_new[s0:s1], k_cache, v_cache, alone, D**-0.5)
    assert torch.equal(out, batched[s0:s1])


def test_rotary_matches_complex_rotation_and_linear_scaling():
    rope = RotaryEmbedding(8, 10000.0)
    pos = torch.tensor([0, 1, 5, 17])
    x = torch.randn(4, 2, 8)
    cos, sin = rope.cos_sin(pos, torch.float32)
    got = apply_rotary(x, cos, sin)
    freqs = 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.polar(torch.ones(4, 4), pos[:, None] * freqs)[:, None]
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], -1), rtol=1e-5, atol=1e-5)
    scaled = RotaryEmbedding(8, 10000.0, "linear", 4.0)
    c4, s4 = scaled.cos_sin(pos * 4, torch.float32)
    torch.testing.assert_close(apply_rotary(x, c4, s4), got, rtol=1e-5, atol=1e-5)
    assert torch.equal(apply_rotary(x, *rope.cos_sin(torch.zeros(4, dtype=torch.long), torch.float32)), x)
    factors = RotaryEmbedding(8, 10000.0, freq_factors=torch.full((4,), 4.0))  # llama 3.1 rope_freqs
    torch.testing.assert_close(apply_rotary(x, *factors.cos_sin(pos * 4, torch.float32)), got)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_dispatch_on_cuda_equals_dense(dtype):
    full, k_cache, v_cache, meta = build_batch(MIXED, "cuda", dtype)
    q_new = write_new_tokens(full, MIXED, k_cache, v_cache, meta)
    out = paged_attention(q_new, k_cache, v_cache, meta, D**-0.5).float()
    ref = torch.cat([dense_causal(q.float(), k.float(), v.float())[d:]
                     for (q, k, v), (d, _) in zip(full, MIXED, strict=True)])
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


def test_decode_launch_rule_at_the_measured_shapes():
    """default_launch (bench/results/s35/attn_split/): splits from the shapes alone (a CUDA graph replays
    one grid at any depth), 512 programs from 64 (sequence, KV head) rows, at most 32 splits over head dim 64,
    none from 256 rows, never more than the context's 64-key tiles."""
    from orcd.models.layers.attention_triton import SplitLaunch, default_launch

    assert default_launch(1, 2, 64, 32768) == (64, SplitLaunch(num_stages=2))  # the 0.5B, one row
    assert default_launch(8, 2, 64, 32768) == (16, SplitLaunch(num_stages=2))  # 16 rows: 256 programs
    assert default_launch(64, 2, 64, 32768) == (4, SplitLaunch(num_stages=2))  # 128 rows: 512 programs
    assert default_launch(1, 4, 128, 32768) == (32, SplitLaunch(num_stages=2))  # the 7B: 32 at most
    assert default_launch(32, 4, 128, 32768) == (4, SplitLaunch(num_stages=2))
    assert default_launch(64, 4, 128, 32768) == (1, SplitLaunch())  # 256 rows: one split, 3 stages
    assert default_launch(1, 4, 128, 100) == (2, SplitLaunch(num_stages=2))  # 100 keys: two tiles
    assert default_launch(1, 1, 256, 64) == (1, SplitLaunch())
