"""The batch-invariant policy (orcd.numerics): which steps run invariant kernels, and the prefix-cache
namespace that keeps seeded requests from reusing K/V computed by the fast kernels."""

import pytest

from orcd.engine.io import EngineRequest, ScheduledSeq, SchedulerOutput
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.numerics import batch_invariant_mode, invariant_layers, invariant_policy
from tests.engine.test_engine_e2e import loaded, run  # noqa: F401 - fixture

PROMPT = list(range(10, 74))  # 64 tokens: 3 full blocks of 16 can be shared (one token is left to compute)


def greedy(seed=None, n=4):
    return SamplingParams(max_tokens=n, temperature=0.0, seed=seed, ignore_eos=True)


def test_policy_values():
    assert invariant_policy(True) == "all" and invariant_policy(False) == "off"
    assert [invariant_policy(p) for p in ("off", "seeded", "all")] == ["off", "seeded", "all"]
    with pytest.raises(ValueError, match="seeded"):
        invariant_policy("sometimes")


def test_mode_switches_the_model_layers_and_restores_them(loaded):  # noqa: F811
    layers = invariant_layers(loaded.model)
    kinds = {type(m).__name__ for m in layers}
    assert {"RMSNorm", "Attention", "QuantLinear"} <= kinds, kinds

    def state() -> set[bool]:
        return {m.batch_invariant for m in layers}

    assert state() == {False}
    with batch_invariant_mode(layers):
        assert state() == {True}
        with batch_invariant_mode(layers, False):
            assert state() == {False}
        assert state() == {True}
    assert state() == {False}


@pytest.mark.parametrize("policy,unseeded,seeded", [("seeded", False, True), ("all", True, True),
                                                     ("off", False, False)])
def test_which_steps_are_invariant(loaded, policy, unseeded, seeded):  # noqa: F811
    runner = LLMEngine(loaded, num_kv_blocks=16, batch_invariant=policy).runner
    plain = ScheduledSeq(1, [5], 3, [0], True, greedy())
    with_seed = ScheduledSeq(2, [5], 3, [1], True, greedy(seed=7))
    assert runner.step_is_invariant(SchedulerOutput([plain], 1)) is unseeded
    assert runner.step_is_invariant(SchedulerOutput([plain, with_seed], 2)) is seeded


def test_seeded_requests_share_prefix_blocks_only_with_each_other(loaded):  # noqa: F811
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16)  # default policy: "seeded"
    bm = engine.block_manager

    def hits_of(req):
        before = bm.prefix_hits
        run(engine, [req])
        return bm.prefix_hits - before

    assert hits_of(EngineRequest("a", PROMPT, greedy())) == 0
    assert hits_of(EngineRequest("b", PROMPT, greedy())) == 48  # unseeded reuse unseeded blocks
    assert hits_of(EngineRequest("c", PROMPT, greedy(seed=1))) == 0  # not the fast kernels' K/V
    assert hits_of(EngineRequest("d", PROMPT, greedy(seed=2))) == 48  # any seed: one namespace
    off = LLMEngine(loaded, num_kv_blocks=64, block_size=16, batch_invariant="off")
    run(off, [EngineRequest("e", PROMPT, greedy())])
    run(off, [EngineRequest("f", PROMPT, greedy(seed=1))])
    assert off.block_manager.prefix_hits == 48


def test_layers_are_switched_only_when_the_setting_changes(loaded, monkeypatch):  # noqa: F811
    """Switching ~240 layers costs ~1 ms: steps that keep the setting must not touch them."""
    from orcd.runner import model_runner

    flips = []
    real = model_runner.set_batch_invariant

    def counting(layers, on):
        flips.append(on)
        real(layers, on)

    monkeypatch.setattr(model_runner, "set_batch_invariant", counting)
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16)  # "seeded"
    run(engine, [EngineRequest("p", PROMPT, greedy(n=6)), EngineRequest("q", PROMPT[:20], greedy(n=6))])
    assert flips == []  # no seed: every step keeps the fast kernels
    run(engine, [EngineRequest("s", PROMPT, greedy(seed=3, n=6))])
    assert flips == [True]  # one switch for all of the seeded request's steps
    run(engine, [EngineRequest("t", PROMPT, greedy(n=6))])
    assert flips == [True, False]
