"""ModelRunner on a tiny random model: chunked/mixed steps equal one-shot prefill; KV sizing."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.io import ScheduledSeq, SchedulerOutput
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache, KVCacheMemoryError, bytes_per_block, num_blocks_for
from orcd.runner.model_runner import ModelRunner, prepare_inputs

GREEDY = SamplingParams(temperature=0.0)
PROMPT = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = write_model_gguf(tmp_path_factory.mktemp("runner") / "m.gguf", "qwen2", vocab_size=300, hidden=64,
                            n_layers=2, ffn=96, n_heads=4, n_kv_heads=2, qtypes={"default": Q.F32})
    return load_model(path, device="cpu", tokenizer=False)


def seq(sid, tokens, done, blocks, sample=True, **kw):
    return ScheduledSeq(sid, tokens, done, blocks, sample, kw.pop("sampling", GREEDY), **kw)


def step(*seqs):
    return SchedulerOutput(list(seqs), sum(len(s.token_ids) for s in seqs))


def test_prepare_inputs_slots_positions_and_tables():
    out = prepare_inputs(step(seq(0, [1, 2, 3], 5, [7, 2]), seq(1, [9], 0, [4], sample=False)), 4, "cpu")
    assert out.input_ids.tolist() == [1, 2, 3, 9]
    assert out.positions.tolist() == [5, 6, 7, 0]
    assert out.attn.slot_mapping.tolist() == [2 * 4 + 1, 2 * 4 + 2, 2 * 4 + 3, 4 * 4]
    assert out.attn.block_tables.tolist() == [[7, 2], [4, 0]]
    assert out.attn.cu_seqlens_q.tolist() == [0, 3, 4] and out.attn.seq_lens.tolist() == [8, 1]
    assert out.sample_rows.tolist() == [2]


def test_chunked_prefill_beside_decodes_equals_one_shot(loaded):
    one = ModelRunner(loaded, num_kv_blocks=16, block_size=4)
    ref = one.forward(step(seq(0, PROMPT, 0, [0, 1, 2])))[0]
    r = ModelRunner(loaded, num_kv_blocks=16, block_size=4)
    # step 1: first 5 prompt tokens (no sample) + another sequence's 2-token prefill
    out = r.execute(step(seq(0, PROMPT[:5], 0, [9, 3], sample=False), seq(1, [8, 8], 0, [5])))
    assert set(out.sampled) == {1} and not out.failed
    # step 2: the other sequence decodes while the rest of the prompt is computed
    logits = r.forward(step(seq(1, [out.sampled[1]], 2, [5]), seq(0, PROMPT[5:], 5, [9, 3, 11])))
    torch.testing.assert_close(logits[1], ref, rtol=1e-5, atol=1e-5)


def test_execute_samples_with_each_rows_params(loaded):
    r = ModelRunner(loaded, num_kv_blocks=16, block_size=4)
    hot = SamplingParams(temperature=1.0, seed=3)
    out = r.execute(step(seq(0, PROMPT[:4], 0, [0]), seq(1, PROMPT[:4], 0, [1], sampling=hot)))
    ref = ModelRunner(loaded, num_kv_blocks=4, block_size=4).forward(step(seq(0, PROMPT[:4], 0, [0])))
    assert out.sampled[0] == int(ref.argmax())
    alone = ModelRunner(loaded, num_kv_blocks=4, block_size=4)
    again = alone.execute(step(seq(7, PROMPT[:4], 0, [2], sampling=hot)))
    assert again.sampled[7] == out.sampled[1]  # same seed, same inputs, alone vs batched


def test_kv_cache_allocation_and_sizing(loaded):
    cfg = loaded.cfg
    kv = KVCache.allocate(cfg, 10, 16, "cpu", torch.float32)
    assert len(kv.k) == cfg.n_layers and kv.k[0].shape == (10, 16, cfg.n_kv_heads, cfg.head_dim)
    assert kv.nbytes == 10 * bytes_per_block(cfg, 16, torch.float32) and kv.capacity_tokens == 160
    assert num_blocks_for(cfg, 16, torch.float32, "cpu", cpu_tokens=1000) == 63
    assert num_blocks_for(cfg, 16, torch.float32, "cpu", cpu_tokens=1000, max_tokens=64) == 4
    with pytest.raises(KVCacheMemoryError):
        num_blocks_for(cfg, 16, torch.float32, "cpu", cpu_tokens=0)
