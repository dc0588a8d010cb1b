"""Decode replayed from CUDA graphs == the same steps run eagerly (tiny synthesized qwen2, Q8_0 raw)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@torch.inference_mode()
def test_graph_decode_matches_eager(tmp_path):
    from orcd.cli.synth import synth_like
    from orcd.loading.loader import load_model
    from orcd.models.kv_cache import KVCache
    from orcd.models.layers.attention import AttnMetadata
    from orcd.runner.decode_graphs import DecodeGraphs

    path, _ = synth_like(str(tmp_path / "tiny.gguf"), "tiny-qwen2", "Q8_0")
    loaded = load_model(path, "cuda", tokenizer=False)
    page, width = 16, 8
    kv = KVCache.allocate(loaded.cfg, 3 * width + 1, page, "cuda", loaded.dtype)  # last block: scratch
    graphs = DecodeGraphs(loaded.model, kv, page, width, scratch_block=3 * width, buckets=(1, 4))
    graphs.capture()
    tables = torch.arange(3 * width, dtype=torch.int32, device="cuda").view(3, width)
    ids = torch.randint(0, loaded.cfg.vocab_size, (3,), device="cuda")
    for step, ctx in enumerate([5, 40, 100]):  # three sequences at different depths, batch 3 -> bucket 4
        pos = torch.tensor([ctx, ctx + 7, ctx + 20], device="cuda")
        slots = tables.gather(1, (pos // page)[:, None].int()).view(-1).long() * page + pos % page
        lens = (pos + 1).int()
        logits_g, tok_g = graphs.replay(ids, pos, slots, lens, tables)
        logits_g = logits_g.clone()
        meta = AttnMetadata(cu_seqlens_q=torch.arange(4, dtype=torch.int32, device="cuda"), seq_lens=lens,
                            block_tables=tables, slot_mapping=slots, max_query_len=1,
                            max_seq_len=int(lens.max()))
        logits_e = loaded.model.compute_logits(loaded.model(ids, pos, meta, kv))
        err = float((logits_g - logits_e).norm() / logits_e.norm())
        assert err < 1e-2, (step, err)
        ids = tok_g.clone()
