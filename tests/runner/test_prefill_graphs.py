"""Prefill-graph padding on the CPU: the padded bucket layout, run eagerly through model.forward, gives the
unpadded eager step's logits and K/V, and padding rows write only the scratch block."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.io import ScheduledSeq, SchedulerOutput
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.runner.model_runner import ModelRunner
from orcd.runner.prefill_graphs import PrefillGraphs, fill_prefill_inputs, pick_bucket
from orcd.runner.sampler import SampleRow, sample

GREEDY = SamplingParams(temperature=0.0)
BS = 4  # block size
NB = 24  # KV blocks of the pool; block NB is the scratch block


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = write_model_gguf(tmp_path_factory.mktemp("pgraphs") / "m.gguf", "qwen2", vocab_size=300,
                            hidden=64, n_layers=2, ffn=96, n_heads=4, n_kv_heads=2, qtypes={"default": Q.F32})
    return load_model(path, device="cpu", tokenizer=False)


def seq(sid, tokens, blocks, sample=True, done=0, sampling=GREEDY):
    return ScheduledSeq(sid, tokens, done, blocks, sample, sampling)


def toks(n: int, seed: int) -> list[int]:
    return torch.randint(1, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_pick_bucket():
    tb, sb = (16, 32, 64), (1, 4)
    assert pick_bucket([seq(0, toks(12, 0), [0, 1, 2])], tb, sb) == (16, 1)
    assert pick_bucket([seq(0, toks(16, 0), [0, 1, 2, 3])], tb, sb) == (16, 1)
    assert pick_bucket([seq(0, toks(17, 0), [0, 1, 2, 3, 4]), seq(1, [5], [6])], tb, sb) == (32, 4)
    assert pick_bucket([seq(0, toks(65, 0), list(range(17)))], tb, sb) is None  # too many tokens
    assert pick_bucket([seq(i, [5], [i]) for i in range(5)], tb, sb) is None  # too many sequences
    assert pick_bucket([seq(0, toks(3, 0), [0, 1], done=4)], tb, sb) is None  # cached prefix / later chunk
    assert pick_bucket([], tb, sb) is None


def test_fill_layout():
    rows, cu32, samp = np.full((3, 16), -1, np.int64), np.full((2, 6), -1, np.int32), np.full(4, -1, np.int64)
    s = [seq(0, [11, 12, 13], [7]), seq(1, [21, 22, 23, 24, 25], [3, 9], sample=False), seq(2, [31], [2])]
    cu, lens, idx = fill_prefill_inputs(s, 16, 4, BS, 30, rows, cu32, samp)
    assert rows[0].tolist() == [11, 12, 13, 21, 22, 23, 24, 25, 31] + [0] * 7
    assert rows[1].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0] + [0] * 7
    assert rows[2, :9].tolist() == [28, 29, 30, 12, 13, 14, 15, 36, 8]
    assert rows[2, 9:].tolist() == [120, 121, 122, 123, 120, 121, 122]  # the scratch block, 30 * 4 + i % 4
    assert cu == [0, 3, 8, 9, 9, 16] and cu32[0].tolist() == cu
    assert lens == [3, 5, 1, 0, 7] and cu32[1, :5].tolist() == lens
    assert idx == [0, 2] and samp.tolist() == [2, 8, 15, 15]


LAYOUTS = {  # name: (seqs, token buckets, seq buckets)
    "one": ([seq(0, toks(12, 1), [2, 5, 7])], (16, 32), (1, 4)),
    "three+unsampled": ([seq(0, toks(5, 2), [4, 1]), seq(1, toks(9, 3), [8, 0, 11], sample=False),
                         seq(2, toks(1, 4), [6])], (16, 32), (1, 4)),
    "exact fit": ([seq(0, toks(7, 5), [3, 12]), seq(1, toks(9, 6), [13, 14, 15])], (16,), (2,)),
    "big pad": ([seq(0, toks(3, 7), [9]), seq(1, toks(6, 8), [10, 20])], (64,), (4, 16)),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_padded_step_equals_eager(loaded, name):
    seqs, tbs, sbs = LAYOUTS[name]
    runner = ModelRunner(loaded, num_kv_blocks=NB, block_size=BS)
    assert runner.prefill_graphs is None  # CPU: no graphs
    eager = runner.forward(SchedulerOutput(seqs, sum(len(s.token_ids) for s in seqs)))
    kv = KVCache.allocate(loaded.cfg, NB + 1, BS, "cpu", loaded.dtype)
    pg = PrefillGraphs(loaded.model, kv, BS, NB, max_num_seqs=16, token_buckets=tbs, seq_buckets=sbs,
                       capture=False)
    key = pg.bucket(seqs)
    assert key is not None and key[0] >= sum(len(s.token_ids) for s in seqs)
    idx, logits, greedy = pg.forward(seqs, key)
    assert idx == [i for i, s in enumerate(seqs) if s.sample]
    assert logits.shape[0] == key[1]
    torch.testing.assert_close(logits[: len(idx)], eager, atol=1e-4, rtol=1e-4)
    assert greedy[: len(idx)].tolist() == eager.argmax(-1).tolist()
    used = sorted({b for s in seqs for b in s.block_table})
    free = [b for b in range(NB) if b not in used]
    for layer in range(loaded.cfg.n_layers):  # real K/V identical; padding wrote only the scratch block
        for mine, ref in ((kv.k[layer], runner.kv.k[layer]), (kv.v[layer], runner.kv.v[layer])):
            torch.testing.assert_close(mine[used], ref[used], atol=1e-5, rtol=1e-5)
            assert not mine[free].any()
        if key[0] > sum(len(s.token_ids) for s in seqs):  # padding rows landed in the scratch block
            assert kv.k[layer][NB].any()


def test_run_samples_like_the_eager_runner(loaded):
    """run(): greedy rows from the captured argmax, a seeded temperature row through sample()."""
    hot = SamplingParams(temperature=0.8, seed=7)
    seqs = [seq(0, toks(6, 9), [1, 2]), seq(1, toks(4, 10), [3], sampling=hot), seq(2, toks(3, 11), [4])]
    runner = ModelRunner(loaded, num_kv_blocks=NB, block_size=BS)
    eager = runner.forward(SchedulerOutput(seqs, 13))
    want = sample(eager, [SampleRow(s.sampling) for s in seqs]).tolist()
    kv = KVCache.allocate(loaded.cfg, NB + 1, BS, "cpu", loaded.dtype)
    pg = PrefillGraphs(loaded.model, kv, BS, NB, token_buckets=(16,), capture=False)
    tokens, to_sample = pg.run(seqs, pg.bucket(seqs))
    assert [s.seq_id for s in to_sample] == [0, 1, 2]
    assert tokens == want
    assert pg.run([seq(0, toks(5, 12), [5, 6], sample=False)], (16, 1)) == ([], [])


def test_sealed_graphs_capture_nothing_more(loaded):
    """Tensor parallel seals the graphs every rank captured at start: a bucket not captured then is
    declined (the step runs eagerly on every rank), and capture_all runs nothing."""
    kv = KVCache.allocate(loaded.cfg, NB + 1, BS, "cpu", loaded.dtype)
    pg = PrefillGraphs(loaded.model, kv, BS, NB, token_buckets=(16,), capture=False)
    seqs = [seq(0, toks(6, 9), [1, 2])]
    assert pg.bucket(seqs) == (16, 1)
    pg.seal()
    assert pg.bucket(seqs) is None and pg.capture_all(16) == [] and pg.warm_seconds == 0.0


@pytest.mark.parametrize("strict", [False, True])
def test_a_failed_capture_raises_when_strict(loaded, strict):
    """A capture that fails (here: no CUDA device) turns the graphs off, or with strict=True (tensor
    parallel, where one rank going eager alone would leave collectives unpaired) raises."""
    kv = KVCache.allocate(loaded.cfg, NB + 1, BS, "cpu", loaded.dtype)
    pg = PrefillGraphs(loaded.model, kv, BS, NB, token_buckets=(16,), strict=strict)
    if strict:
        with pytest.raises((RuntimeError, AssertionError)):
            pg.forward([], (16, 1))
    else:
        assert pg.forward([], (16, 1)) is None and pg.failed
