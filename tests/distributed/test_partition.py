"""Tensor-parallel partitioning: head/KV/FFN/vocab ranges and the errors for files that do not split."""

from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as Q

from orcd.cli.main import main
from orcd.distributed.partition import TensorParallelError, split_heads, split_units
from orcd.distributed.shard import shard_model
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

DIMS = dict(vocab_size=321, hidden=64, n_layers=2, ffn=128, n_heads=4, context_length=128)


def test_heads_split_evenly_and_kv_heads_follow_their_queries():
    assert [split_heads(8, 4, 2, r) for r in range(2)] == [
        split_heads(8, 4, 2, 0), split_heads(8, 4, 2, 1)]
    assert [(s.q, s.kv) for s in (split_heads(8, 4, 2, r) for r in range(2))] == [((0, 4), (0, 2)),
                                                                                    ((4, 8), (2, 4))]
    # fewer KV heads than ranks: each rank keeps the one KV head its queries read (replicated)
    assert [(s.q, s.kv) for s in (split_heads(8, 2, 4, r) for r in range(4))] == [
        ((0, 2), (0, 1)), ((2, 4), (0, 1)), ((4, 6), (1, 2)), ((6, 8), (1, 2))]
    assert split_heads(4, 1, 2, 1).kv == (0, 1)
    with pytest.raises(TensorParallelError, match="4 attention heads do not split evenly over 3"):
        split_heads(4, 2, 3, 0)
    with pytest.raises(TensorParallelError, match="6 KV heads do not split evenly over 4"):
        split_heads(12, 6, 4, 0)


def test_units_split_balanced_on_block_boundaries():
    # 18944 FFN columns (Qwen2.5-7B) in 256-blocks: 74 blocks over 4 ranks -> 19, 19, 18, 18 blocks
    spans = [split_units(18944, 256, 4, r, "ffn") for r in range(4)]
    assert [(b - a) // 256 for a, b in spans] == [19, 19, 18, 18]
    assert spans[0][0] == 0 and spans[-1][1] == 18944
    assert all(spans[i][1] == spans[i + 1][0] for i in range(3))
    assert [split_units(5, 1, 2, r, "vocab") for r in range(2)] == [(0, 3), (3, 5)]
    with pytest.raises(TensorParallelError, match="ffn: 2 blocks of 256 cannot be split over 4 ranks"):
        split_units(512, 256, 4, 0, "ffn")


def test_shard_model_keeps_the_ranks_heads_and_names_a_misaligned_tensor(tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", n_kv_heads=1, qtypes={"default": Q.Q8_0}, **DIMS)
    loaded = load_model(path, "cpu", keep_quantized=True, tokenizer=False)
    local = shard_model(loaded.model, loaded.cfg, 1, 2)
    assert (local.n_heads, local.n_kv_heads, local.ffn_size) == (2, 1, 64)
    attn = loaded.model.blocks[0].attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.o_proj.in_features) == (32, 16, 32)
    assert attn.o_proj.inner.raw.shape == (64, 34)  # one Q8_0 block (34 bytes) of 32 columns per row
    assert loaded.model.embed.v0 == 161 and loaded.model.lm_head.out_features == 321
    # 4 ranks: 1 head of 16 columns each, half a Q8_0 block of attn_output
    again = load_model(path, "cpu", keep_quantized=True, tokenizer=False)
    with pytest.raises(TensorParallelError, match=r"blk\.0\.attn_output\.weight: input columns \[16, 32\)"):
        shard_model(again.model, again.cfg, 1, 4)


def test_cli_refuses_a_split_before_starting_ranks(tmp_path, capsys):
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", n_kv_heads=2, qtypes={"default": Q.Q8_0}, **DIMS)
    argv = ["generate", "--model", str(path), "--device", "cpu", "--quiet", "hi"]
    assert main([*argv, "--tensor-parallel", "3"]) == 2
    assert "4 attention heads do not split evenly over 3 ranks" in capsys.readouterr().err
    assert main([*argv, "--tensor-parallel", "4"]) == 2
    assert "blk.0.attn_output.weight" in capsys.readouterr().err
