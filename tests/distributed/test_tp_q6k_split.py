"""The split Q6_K layout under tensor parallelism (issue 21), on the CPU: which of a rank's slices
fused_tp.split_readers names (the Q6_K weights its TPFusedDecoder reads split: v after int8 q/k/v,
down after the int8 SwiGLU, the head's rows), that split_q6k never touches the embedding's table (nor a
head tied to it), the bytes round-trip, load_sharded's option and the CLI's threading of it.
The CPU stands in for CUDA: TRITON_INTERPRET=1 lets check_fusable pass; the shards are built in-process
(shard_model runs no collective), so nothing here starts a rank."""

from __future__ import annotations

import argparse

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.distributed import driver
from orcd.distributed.fused_tp import split_readers
from orcd.distributed.mapped import load_mapped
from orcd.distributed.runtime import TPContext
from orcd.distributed.shard import shard_model
from orcd.errors import LoadOptionError
from orcd.gguf.synth import write_model_gguf
from orcd.loading.q6k_layout import split_q6k
from orcd.quant.kernels.layout import unsplit_q6_k
from orcd.quant.linear import QuantLinear

# 2 ranks: 2 heads of 128 each = 256 o columns (one Q4_K/Q6_K block), 256 FFN columns, 48 vocab rows
DIMS = dict(vocab_size=96, hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2, head_dim=128,
            context_length=256, tokenizer_metadata={})
MIX = {"default": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K, "token_embd": Q.Q6_K}
# what the int8 step reads split on each rank of the Q4_K_M mix (qwen2: q/k/v all have biases)
READERS = {"blocks.0.attn.v_proj", "blocks.1.attn.v_proj", "blocks.0.mlp.down.inner",
           "blocks.1.mlp.down.inner", "lm_head.inner"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tp_q6k")
    return {tied: str(write_model_gguf(d / f"tied{tied}.gguf", "qwen2", tied=tied, qtypes=MIX, seed=5,
                                       **DIMS)) for tied in (False, True)}


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the fused kernels "run" on the CPU (check_fusable)


def _shard(path: str, rank: int, dtype=torch.bfloat16):
    loaded = load_mapped(path, dtype, tokenizer=False)
    shard_model(loaded.model, loaded.cfg, rank, 2)
    return loaded.model


def _names(model, mods) -> set[str]:
    ids = {id(m) for m in mods}
    return {n for n, m in model.named_modules() if id(m) in ids}


def _split_names(model) -> set[str]:
    return {n for n, m in model.named_modules() if isinstance(m, QuantLinear) and m.layout == "split"}


@pytest.mark.parametrize("rank", [0, 1])
def test_split_readers_of_a_shard(files, interpret, monkeypatch, rank):
    model = _shard(files[False], rank)
    chosen = split_readers(model)
    assert _names(model, chosen) == READERS
    monkeypatch.delenv("TRITON_INTERPRET")  # dense_weight: the host dequantize (the kernels are not compiled)
    before = {n: (m.raw.clone(), m.dense_weight()) for n, m in model.named_modules() if n in READERS}
    table = model.embed.local.table
    assert table.qtype == Q.Q6_K and table.raw is not None  # a Q6_K table that must stay GGUF
    assert split_q6k(model, chosen) == len(READERS)
    assert _split_names(model) == READERS and table.layout == "gguf"
    for name, m in model.named_modules():
        if name in READERS:
            raw, w = before[name]
            assert not torch.equal(m.raw, raw)  # rearranged, in place
            assert torch.equal(unsplit_q6_k(m.raw), raw) and torch.equal(m.dense_weight(), w)
    ids = torch.tensor([0, 5, 47])
    assert model.embed.local(ids).shape == (3, 256)  # the table still gathers rows
    assert split_q6k(model, chosen) == 0  # already split: nothing converted twice


def test_tied_head_stays_gguf(files, interpret):
    model = _shard(files[True], 0)
    assert model.lm_head.inner is model.embed.local.table
    assert any(m is model.lm_head.inner for m in split_readers(model))  # the step reads the head's rows...
    assert split_q6k(model, split_readers(model)) == 4  # ...but the table is never converted
    assert _split_names(model) == READERS - {"lm_head.inner"}
    assert model.lm_head.inner.layout == "gguf"


def test_nothing_where_the_step_does_not_read_split(files, tmp_path, monkeypatch):
    """float32 shards keep float x (no int8 kernels); without the kernels (check_fusable fails) or on
    blocks the step does not run (qwen3) or on a model that is no shard: nothing."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert split_readers(_shard(files[False], 0)) == []  # the CPU: no fused kernel
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert split_readers(_shard(files[False], 0, torch.float32)) == []
    assert split_readers(load_mapped(files[False], torch.bfloat16, tokenizer=False).model) == []  # unsharded
    qwen3 = write_model_gguf(tmp_path / "qwen3.gguf", "qwen3", tied=False, qtypes=MIX, seed=6, **DIMS)
    assert split_readers(_shard(str(qwen3), 0)) == []


def _ctx(rank: int = 0) -> TPContext:
    return TPContext(rank, 2, torch.device("cpu"), None, None)


def test_load_sharded_option(files, interpret, monkeypatch):
    """load_sharded: "split" and unknown layouts refused before the load; off CUDA "auto" is "gguf"
    (nothing split); where "auto" applies (forced here) the rank's readers are split after slicing."""
    with pytest.raises(LoadOptionError, match="one GPU"):
        driver.load_sharded(files[False], _ctx(), q6k_layout="split")
    with pytest.raises(LoadOptionError, match="one of"):
        driver.load_sharded(files[False], _ctx(), q6k_layout="packed")
    assert driver.check_tp_q6k_layout("auto", torch.device("cuda"), True) == "auto"
    assert driver.check_tp_q6k_layout("auto", torch.device("cuda"), False) == "gguf"
    assert driver.check_tp_q6k_layout("gguf", torch.device("cuda"), True) == "gguf"
    kw = dict(dtype=torch.bfloat16, keep_quantized=True, tokenizer=False)
    assert _split_names(driver.load_sharded(files[False], _ctx(), **kw).model) == set()  # the CPU
    monkeypatch.setattr(driver, "check_tp_q6k_layout", lambda layout, dev, keep: layout)
    assert _split_names(driver.load_sharded(files[False], _ctx(1), **kw).model) == READERS
    assert _split_names(driver.load_sharded(files[False], _ctx(1), q6k_layout="gguf", **kw).model) == set()


@pytest.mark.parametrize("command", ["serve", "generate"])
def test_cli_ranks_pass_the_layout(monkeypatch, command):
    """`orcd serve/generate --tensor-parallel N --q6k-layout X`: every rank's load_sharded gets X."""
    from orcd.cli.generate import generate_rank
    from orcd.cli.serve import serve_rank

    seen = []
    monkeypatch.setattr(driver, "load_sharded", lambda path, ctx, dtype, **kw: seen.append(kw) or "loaded")
    monkeypatch.setattr(driver, "run_rank", lambda ctx, loaded, lead: 0)
    rank_fn = serve_rank if command == "serve" else generate_rank
    for layout in ("gguf", "auto"):
        assert rank_fn(_ctx(), argparse.Namespace(model="m.gguf", dtype="auto", q6k_layout=layout)) == 0
    assert seen == [dict(q6k_layout="gguf"), dict(q6k_layout="auto")]
