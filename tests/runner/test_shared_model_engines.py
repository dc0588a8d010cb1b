"""Engines sharing one loaded model. The batch-invariant switch lives on the model's layers
(orcd.numerics), so an engine whose last step was batch-invariant leaves it on for the next engine built on
the same model. On CUDA a new engine that took it for off captured its prefill graphs on the invariant
kernels, whose host-built tile lists the graphs then re-read from freed memory (an illegal memory access).
Here, on the CPU: each step, and each prefill-graph step, runs the setting it should whatever the layers
were left at."""

from __future__ import annotations

import pytest

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.numerics import batch_invariant_mode, invariant_layers, set_batch_invariant
from orcd.runner.model_runner import ModelRunner
from orcd.runner.prefill_graphs import PrefillGraphs
from tests.engine.test_engine_e2e import loaded, run  # noqa: F401 - fixture

BS, NB = 4, 40  # block size; KV blocks of the pool (block NB is the prefill graphs' scratch block)


def greedy(n: int = 3, seed: int | None = None) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, seed=seed, ignore_eos=True)


@pytest.fixture
def model(loaded):  # noqa: F811
    """The shared tiny model, its layers back to the fast kernels after each test."""
    yield loaded
    set_batch_invariant(invariant_layers(loaded.model), False)


@pytest.fixture
def seen(model):
    """The batch-invariant setting of one of the model's layers at each of its forwards."""
    calls: list[bool] = []
    hook = model.model.blocks[0].attn.q_proj.register_forward_pre_hook(
        lambda m, args: calls.append(m.batch_invariant))
    yield calls
    hook.remove()


def test_an_engine_built_after_an_invariant_one_runs_the_fast_kernels(model, seen):
    run(LLMEngine(model, num_kv_blocks=16, batch_invariant="all"), [EngineRequest("a", [5, 6, 7], greedy())])
    assert seen and all(seen)  # the first engine's steps, which leave the layers on
    seen.clear()
    run(LLMEngine(model, num_kv_blocks=16), [EngineRequest("b", [5, 6, 7], greedy())])  # "seeded", no seed
    assert seen and not any(seen)


def test_engines_stepping_side_by_side_each_run_their_own_setting(model, seen):
    on = LLMEngine(model, num_kv_blocks=16, batch_invariant="all")
    off = LLMEngine(model, num_kv_blocks=16, batch_invariant="off")
    on.add_request(EngineRequest("x", [9, 8, 7, 6], greedy(4)))
    off.add_request(EngineRequest("y", [9, 8, 7, 6], greedy(4)))
    forwards = {True: 0, False: 0}
    while on.has_work() or off.has_work():
        for engine, want in ((on, True), (off, False)):
            seen.clear()
            if engine.has_work():
                engine.step()  # one forward, or none (the last, which reads a step already launched)
                kind = "invariant" if want else "fast"
                assert seen in ([want], []), f"a step of the {kind} engine saw {seen}"
                forwards[want] += len(seen)
    assert forwards == {True: 4, False: 4}


def test_prefill_graph_steps_run_the_fast_kernels_whatever_the_layers_were_left_at(model, seen):
    """The warm-up at engine start runs (on CUDA: captures) every prefill bucket; with the layers left
    batch-invariant by an earlier engine it must still run the fast kernels, and leave the layers as it
    found them."""
    layers = invariant_layers(model.model)
    runner = ModelRunner(model, num_kv_blocks=NB + 1, block_size=BS)
    runner.prefill_graphs = PrefillGraphs(model.model, runner.kv, BS, NB, max_num_seqs=4,  # eager steps
                                          token_buckets=(16, 32), seq_buckets=(1, 4), capture=False)
    with batch_invariant_mode(layers, True):  # as an engine whose last step was seeded leaves them
        engine = LLMEngine(model, num_kv_blocks=NB, block_size=BS, max_num_seqs=4, max_num_batched_tokens=32,
                           runner=runner)
        assert engine.prefill_graph_warmup["buckets"] == [(32, 4), (32, 1), (16, 4), (16, 1)]
        assert seen and not any(seen)
        assert all(m.batch_invariant for m in layers)
        seen.clear()
        out = run(engine, [EngineRequest("p", list(range(3, 15)), greedy())])  # unseeded: a prefill graph
        assert runner.steps_by_executor.get("prefill_graph", 0) == 1
        assert seen and not any(seen)
    fresh = LLMEngine(model, num_kv_blocks=NB, block_size=BS)
    assert out["p"] == run(fresh, [EngineRequest("q", list(range(3, 15)), greedy())])["q"]
