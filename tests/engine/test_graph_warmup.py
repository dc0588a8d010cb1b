"""Prefill-graph warm-up at engine start, on the CPU (no CUDA: the padded steps run eagerly): which buckets
are planned, that the all-padding warm-up steps write only the scratch block, and that an engine warmed
this way generates what an engine without prefill graphs generates."""

from __future__ import annotations

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner
from orcd.runner.prefill_graphs import SEQ_BUCKETS, TOKEN_BUCKETS, PrefillGraphs, capture_plan

BS, NB = 4, 40  # block size; KV blocks of the pool (block NB is the scratch block)
TBS, SBS = (16, 32, 64), (1, 4)  # small buckets for the tiny model


def test_plan_covers_every_bucket_a_step_can_pick_largest_first():
    plan = capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, 2048)
    assert len(plan) == len(TOKEN_BUCKETS) * len(SEQ_BUCKETS) == len(set(plan))
    assert plan[0] == (2048, 16) and plan[-1] == (64, 1)
    assert plan == sorted(plan, reverse=True)
    assert {tb for tb, _ in capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, 500)} == {64, 128, 256, 512}
    assert {tb for tb, _ in capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, 512)} == {64, 128, 256, 512}
    assert capture_plan(TOKEN_BUCKETS, (1,), 64) == [(64, 1)]
    assert len(capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, 8192)) == 18  # chunks stop at the top bucket


@pytest.fixture(scope="module")
def loaded(tiny_qwen2_gguf):
    return load_model(tiny_qwen2_gguf, device="cpu")


def engine_with_prefill_graphs(loaded, warm: bool, budget: int = 48) -> LLMEngine:
    """A real ModelRunner (one KV block more: the scratch block) given eager prefill graphs."""
    runner = ModelRunner(loaded, num_kv_blocks=NB + 1, block_size=BS)
    runner.prefill_graphs = PrefillGraphs(loaded.model, runner.kv, BS, NB, max_num_seqs=8, token_buckets=TBS,
                                          seq_buckets=SBS, capture=False)
    return LLMEngine(loaded, num_kv_blocks=NB, block_size=BS, max_num_seqs=8, max_num_batched_tokens=budget,
                     runner=runner, warm_prefill_graphs=warm)


def test_warmup_runs_the_plan_and_writes_only_the_scratch_block(loaded):
    engine = engine_with_prefill_graphs(loaded, warm=True)
    warm = engine.prefill_graph_warmup
    assert warm["buckets"] == capture_plan(TBS, SBS, 48) == [(64, 4), (64, 1), (32, 4), (32, 1), (16, 4),
                                                             (16, 1)]
    assert not warm["failed"] and warm["seconds"] > 0
    kv = engine.runner.kv
    for k in kv.k + kv.v:  # [blocks, ...]: the pool's blocks untouched, the scratch block written
        assert not k[:NB].any()
        assert k[NB].any()
    assert engine_with_prefill_graphs(loaded, warm=False).prefill_graph_warmup is None


def test_no_prefill_graphs_nothing_to_warm(loaded):
    engine = LLMEngine(loaded, num_kv_blocks=NB, block_size=BS)  # CPU runner: no graphs
    assert engine.runner.prefill_graphs is None and engine.prefill_graph_warmup is None


def generate(engine: LLMEngine, prompts: list[list[int]], n: int) -> dict[str, list[int]]:
    for i, p in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{i}", p, SamplingParams(max_tokens=n, temperature=0.0,
                                                                     ignore_eos=True)))
    out: dict[str, list[int]] = {}
    while engine.has_work():
        for ev in engine.step():
            if ev.token_id is not None:
                out.setdefault(ev.request_id, []).append(ev.token_id)
    return out


def test_warmed_engine_generates_like_an_engine_without_prefill_graphs(loaded):
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 300, (n,), generator=g).tolist() for n in (5, 11, 3, 17)]
    want = generate(LLMEngine(loaded, num_kv_blocks=NB, block_size=BS, max_num_seqs=8,
                              max_num_batched_tokens=48), prompts, 6)
    engine = engine_with_prefill_graphs(loaded, warm=True)
    assert generate(engine, prompts, 6) == want
    assert engine.runner.steps_by_executor.get("prefill_graph", 0) >= 1  # the padded path did run
