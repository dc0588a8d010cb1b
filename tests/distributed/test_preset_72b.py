"""The qwen2.5-72b synth preset: Qwen2.5-72B-Instruct's shapes and Q4_K_M plan, checked without writing
the 47 GB file, and its tensor-parallel split over 2, 4 and 8 ranks."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from orcd.distributed.partition import TensorParallelError, plan_rank
from orcd.gguf.presets import PRESETS, plan_qtypes
from orcd.gguf.synth import tensor_shapes
from orcd.quant.registry import get_format

P = PRESETS["qwen2.5-72b"]


def shapes_and_plan():
    shapes = tensor_shapes(P["arch"], P["vocab_size"], P["hidden"], P["n_layers"], P["ffn"], P["n_heads"],
                           P["n_kv_heads"], P["tied"])
    return shapes, plan_qtypes(shapes, "Q4_K_M", P["n_layers"])


def nbytes(shape: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def test_preset_is_qwen25_72b():
    dims = (P["arch"], P["n_layers"], P["hidden"], P["n_heads"], P["n_kv_heads"])
    assert dims == ("qwen2", 80, 8192, 64, 8)
    assert (P["ffn"], P["vocab_size"], P["tied"], P["quant"]) == (29568, 152064, False, "Q4_K_M")
    shapes, _ = shapes_and_plan()
    assert shapes["blk.0.attn_q.weight"] == (8192, 8192) and shapes["blk.0.attn_k.weight"] == (1024, 8192)
    assert shapes["blk.79.ffn_down.weight"] == (8192, 29568) and shapes["output.weight"] == (152064, 8192)
    params = sum(nbytes(s, Q.F32) // 4 for s in shapes.values())
    assert 72.0e9 < params < 73.5e9  # 72.7 B parameters


def test_q4_k_m_plan_falls_back_on_ffn_down_and_is_about_47_gb():
    shapes, plan = shapes_and_plan()
    assert plan["output.weight"] == Q.Q6_K and plan["token_embd.weight"] == Q.Q4_K
    downs = Counter(plan[f"blk.{i}.ffn_down.weight"] for i in range(80))
    assert set(downs) == {Q.Q5_0, Q.Q8_0}  # 29568 is not a whole number of 256-blocks: Q4_K/Q6_K fall back
    assert {plan[f"blk.{i}.attn_v.weight"] for i in range(80)} == {Q.Q4_K, Q.Q6_K}
    total = sum(nbytes(s, plan.get(n, Q.F32)) for n, s in shapes.items())
    assert 45e9 < total < 49e9, total


@pytest.mark.parametrize("world", [2, 4, 8])
def test_splits_over_2_4_8_ranks(world):
    _, plan = shapes_and_plan()
    cfg = SimpleNamespace(n_heads=64, n_kv_heads=8, head_dim=128, ffn_size=29568, vocab_size=152064)
    o = [get_format(plan[f"blk.{i}.attn_output.weight"]).block_size for i in range(80)]
    down = [get_format(plan[f"blk.{i}.ffn_down.weight"]).block_size for i in range(80)]
    plans = [plan_rank(cfg, o, down, world, r) for r in range(world)]
    assert [p.heads.q[1] - p.heads.q[0] for p in plans] == [64 // world] * world
    assert [p.heads.kv[1] - p.heads.kv[0] for p in plans] == [8 // world] * world
    assert sum(p.ffn[1] - p.ffn[0] for p in plans) == 29568 and all(p.ffn[0] % 32 == 0 for p in plans)
    with pytest.raises(TensorParallelError):
        plan_rank(cfg, o, down, 3, 0)  # 64 heads over 3 ranks


def test_large_tensors_repeat_one_random_tile_small_ones_do_not():
    import numpy as np
    from gguf import quants

    from orcd.gguf.synth_blocks import TILE_BYTES, random_block_rows, random_tensor

    small = random_tensor(Q.Q8_0, (64, 96), np.random.default_rng(1), 0.02)
    assert np.array_equal(small, random_block_rows(Q.Q8_0, 64, 96, np.random.default_rng(1), 0.02))
    rows = TILE_BYTES // 4608 * 3 + 5  # Q4_K rows of 8192: 4608 bytes; three tiles and a part
    big = random_tensor(Q.Q4_K, (rows, 8192), np.random.default_rng(2), 0.02)
    assert big.shape == (rows, 4608) and big.dtype == np.uint8
    tile = TILE_BYTES // 4608
    assert np.array_equal(big[:5], big[tile : tile + 5])
    w = quants.dequantize(big[-8:], Q.Q4_K)
    assert np.isfinite(w).all() and 0.01 < w.std() < 0.04
