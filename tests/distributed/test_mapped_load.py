"""load_mapped: the model on the host with raw blocks as views of the file's mmap (nothing copied), the
same numbers as load_model's private copies, and a shard whose slices are private copies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.distributed.mapped import load_mapped
from orcd.distributed.shard import shard_model
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import AttnMetadata


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("mapped")
    return str(write_model_gguf(d / "m.gguf", "qwen2", vocab_size=321, hidden=64, n_layers=2, ffn=96,
                                n_heads=4, n_kv_heads=2, context_length=256, qtypes={"default": Q.Q8_0},
                                tied=False, seed=3))


def _shares_file(t: torch.Tensor, loaded, name: str) -> bool:
    return np.shares_memory(t.numpy(), loaded.gguf.tensors[name].data)


def _logits(loaded) -> torch.Tensor:
    ids = torch.tensor([1, 17, 42, 99, 7])
    meta = AttnMetadata(cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32),
                        seq_lens=torch.tensor([5], dtype=torch.int32),
                        block_tables=torch.zeros((1, 1), dtype=torch.int32),
                        slot_mapping=torch.arange(5), max_query_len=5, max_seq_len=5)
    kv = KVCache.allocate(loaded.cfg, 1, 16, "cpu", torch.float32)
    with torch.inference_mode():
        return loaded.model.compute_logits(loaded.model(ids, torch.arange(5), meta, kv))


def test_raw_blocks_stay_in_the_mmap_and_give_the_same_logits(path):
    mapped = load_mapped(path, torch.float32, tokenizer=False)
    q = mapped.model.blocks[1].attn.q_proj
    assert q.raw is not None and _shares_file(q.raw, mapped, "blk.1.attn_q.weight")
    assert _shares_file(mapped.model.lm_head.raw, mapped, "output.weight")
    copied = load_model(path, "cpu", dtype=torch.float32, keep_quantized=True, tokenizer=False)
    assert not _shares_file(copied.model.blocks[1].attn.q_proj.raw, copied, "blk.1.attn_q.weight")
    assert torch.equal(_logits(mapped), _logits(copied))


def test_a_shard_of_the_mapped_model_owns_its_slices(path):
    mapped = load_mapped(path, torch.float32, tokenizer=True)
    assert mapped.tokenizer is not None
    cfg = shard_model(mapped.model, mapped.cfg, 1, 2, device="cpu")  # no collective runs while sharding
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.ffn_size) == (2, 1, 32)
    blk = mapped.model.blocks[0]
    for t, name in ((blk.attn.q_proj.raw, "blk.0.attn_q.weight"),
                    (blk.attn.o_proj.inner.raw, "blk.0.attn_output.weight"),
                    (blk.mlp.down.inner.raw, "blk.0.ffn_down.weight"),
                    (mapped.model.lm_head.inner.raw, "output.weight")):
        assert not _shares_file(t, mapped, name), name
