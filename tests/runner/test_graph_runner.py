"""The decode-graph plumbing of ModelRunner on the CPU: inputs, padding, the scratch block, sampling.

CUDA graphs cannot be captured here, so DecodeGraphs runs its step uncaptured (model.forward on the same
static buffers a graph would read); the engine's tokens must equal the plain eager engine's.
"""

import numpy as np
import pytest

from orcd.engine.io import ScheduledSeq
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.models.kv_cache import KVCache
from orcd.runner.decode_graphs import DecodeGraphs, buckets_for, fill_decode_inputs, table_width
from orcd.runner.model_runner import ModelRunner
from tests.engine.test_engine_e2e import loaded, run, workload  # noqa: F401 (fixture)


def test_buckets_cap_at_max_num_seqs():
    assert buckets_for(1) == (1,)
    assert buckets_for(8) == (1, 2, 4, 8)
    assert buckets_for(10) == (1, 2, 4, 8, 16)
    assert buckets_for(64) == buckets_for(500) == (1, 2, 4, 8, 16, 32, 64)
    assert table_width(512, 16) == 32 and table_width(33, 16) == 3


def test_fill_decode_inputs_pads_rows_to_the_scratch_block():
    sp = SamplingParams()
    seqs = [ScheduledSeq(7, [11], 20, [3, 5], True, sp), ScheduledSeq(8, [12], 0, [9], True, sp)]
    rows = np.full((4, 4), -1, dtype=np.int64)
    table = np.full((4, 3), -1, dtype=np.int32)
    fill_decode_inputs(seqs, 4, 16, 99, rows, table)
    assert rows.tolist() == [[11, 12, 0, 0], [20, 0, 0, 0], [5 * 16 + 4, 9 * 16, 99 * 16, 99 * 16],
                             [21, 1, 1, 1]]
    assert table[:2, :2].tolist() == [[3, 5], [9, -1]] and (table[2:] == 99).all()


def graph_engine(loaded, num_blocks: int, **kw) -> LLMEngine:  # noqa: F811
    """An engine whose runner takes the graph path uncaptured, laid out as on CUDA (scratch block last)."""
    runner = ModelRunner(loaded, num_blocks, 16)
    runner.kv = KVCache.allocate(loaded.cfg, num_blocks + 1, 16, "cpu", loaded.dtype)
    max_len = min(loaded.cfg.context_length, num_blocks * 16)
    runner.graph = DecodeGraphs.for_engine(loaded.model, runner.kv, 16, max_len, kw.get("max_num_seqs", 64),
                                           scratch_block=num_blocks, fuse=False)
    return LLMEngine(loaded, num_kv_blocks=num_blocks, block_size=16, runner=runner, **kw)


@pytest.mark.parametrize("max_num_seqs", [3, 64])
def test_graph_path_equals_eager(loaded, max_num_seqs):  # noqa: F811
    reqs = workload()  # greedy and seeded (top-k/top-p/repetition penalty) requests, shared prefixes
    eager = run(LLMEngine(loaded, num_kv_blocks=64, block_size=16, max_num_seqs=max_num_seqs), reqs)
    engine = graph_engine(loaded, 64, max_num_seqs=max_num_seqs)
    assert run(engine, reqs) == eager
    graph = engine.runner.graph
    assert graph.steps > 0 and graph.buckets[-1] == (4 if max_num_seqs == 3 else 64)
    assert engine.block_manager.num_blocks == 64 and engine.runner.kv.num_blocks == 65
    engine.block_manager.check_integrity([])
    # padded rows (e.g. 3 sequences in bucket 4) wrote K/V into the scratch block, block 64
    assert any(k[64].abs().sum() > 0 for k in engine.runner.kv.k)


def test_ineligible_steps_stay_eager(loaded):  # noqa: F811
    engine = graph_engine(loaded, 64, max_num_seqs=64)
    g = engine.runner.graph
    sp = SamplingParams()
    assert g.eligible([ScheduledSeq(1, [5], 3, [0], True, sp)])
    assert not g.eligible([ScheduledSeq(1, [5, 6], 0, [0], True, sp)])  # prefill chunk
    assert not g.eligible([ScheduledSeq(i, [5], 3, [i], True, sp) for i in range(65)])  # above 64
    assert not g.eligible([ScheduledSeq(1, [5], 3, list(range(g.width + 1)), True, sp)])  # too wide
    assert not g.eligible([])


def test_cpu_engine_captures_nothing(loaded):  # noqa: F811
    engine = LLMEngine(loaded, num_kv_blocks=8, block_size=16)
    assert engine.runner.graph is None and engine.runner.kv.num_blocks == 8
