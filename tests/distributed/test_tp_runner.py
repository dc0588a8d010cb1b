"""follower_step takes the executor rank 0's ModelRunner takes for the same step (decode graph when one
is eligible, of the step's invariance; else eager), or the ranks' collectives would not pair up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from orcd.distributed.tp_runner import follower_step


class FakeGraph:
    def __init__(self, ok: bool):
        self.ok, self.ran = ok, 0

    def eligible(self, seqs) -> bool:
        return self.ok

    def run(self, seqs, prev=None):
        self.ran += 1


def fake_runner(policy: str, graph, graph_invariant):
    calls = []
    runner = SimpleNamespace(graph=graph, graph_invariant=graph_invariant, set_invariant=lambda on: None,
                             device=torch.device("cpu"), eager=calls,
                             forward_seqs=lambda seqs, prev=None: calls.append(len(seqs)))
    runner.step_is_invariant = lambda sched: policy == "all" or (
        policy == "seeded" and any(s.sampling.seed is not None for s in sched.seqs))
    return runner


def sched(seed=None):
    seq = SimpleNamespace(sampling=SimpleNamespace(seed=seed), token_ids=[5])
    return SimpleNamespace(seqs=[seq])


@pytest.mark.parametrize("seed,want", [(None, "plain"), (7, "invariant")])
def test_follower_replays_the_graph_of_the_steps_invariance(seed, want):
    graphs = {"plain": FakeGraph(True), "invariant": FakeGraph(True)}
    runner = fake_runner("seeded", graphs["plain"], graphs["invariant"])
    assert follower_step(runner, sched(seed)) == "decode_graph"
    assert graphs[want].ran == 1 and sum(g.ran for g in graphs.values()) == 1 and runner.eager == []


def test_follower_runs_eagerly_when_no_graph_takes_the_step():
    ineligible = FakeGraph(False)
    runner = fake_runner("off", ineligible, None)
    assert follower_step(runner, sched()) == "eager" and runner.eager == [1] and ineligible.ran == 0
    runner = fake_runner("seeded", FakeGraph(True), None)  # no invariant graphs captured
    assert follower_step(runner, sched(seed=3)) == "eager"


@pytest.mark.parametrize("policy", ["off", "seeded", "all"])
@pytest.mark.parametrize("eligible", [True, False])
def test_leader_runner_picks_what_the_follower_picks(tmp_path, policy, eligible):
    """TPModelRunner.executors (rank 0) against follower_step, with stand-in graphs on a CPU runner."""
    from gguf import GGMLQuantizationType as Q

    from orcd.distributed.tp_runner import TPModelRunner
    from orcd.gguf.synth import write_model_gguf
    from orcd.loading.loader import load_model

    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=320, hidden=32, n_layers=1, ffn=64,
                            n_heads=2, n_kv_heads=1, context_length=64, qtypes={"default": Q.F32})
    runner = TPModelRunner(load_model(path, "cpu", tokenizer=False), 8, 16, decode_graphs=True,
                           max_num_seqs=4, batch_invariant=policy)
    assert runner.prefill_graphs is None and runner.num_kv_blocks == 8
    runner.graph, runner.graph_invariant = FakeGraph(eligible), FakeGraph(eligible)
    for step in (sched(), sched(seed=1)):
        leader = next(e for e in runner.executors(runner.step_is_invariant(step)) if e.accepts(step.seqs))
        follower = fake_runner(policy, runner.graph, runner.graph_invariant)
        assert follower_step(follower, step) == leader.name
