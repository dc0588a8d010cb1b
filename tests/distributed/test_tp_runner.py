"""follower_step runs the executor rank 0's ModelRunner picked for the same step (its name comes in the
step message): the decode graph of the step's invariance, the prefill graph, both (split step) or eager,
or the ranks' collectives would not pair up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from orcd.distributed.tp_runner import follower_step


class FakePrefill:
    def __init__(self):
        self.ran = []

    def bucket(self, seqs):
        return (64, 1)

    def forward(self, seqs, key):
        self.ran.append((len(seqs), key))


class FakeGraph:
    def __init__(self, ok: bool):
        self.ok, self.ran = ok, 0

    def eligible(self, seqs) -> bool:
        return self.ok

    def run(self, seqs, prev=None):
        self.ran += 1
        self.rows = len(seqs)


def fake_runner(policy: str, graph, graph_invariant):
    calls = []
    runner = SimpleNamespace(graph=graph, graph_invariant=graph_invariant, set_invariant=lambda on: None,
                             prefill_graphs=FakePrefill(),
                             device=torch.device("cpu"), eager=calls,
                             forward_seqs=lambda seqs, prev=None: calls.append(len(seqs)))
    runner.step_is_invariant = lambda sched: policy == "all" or (
        policy == "seeded" and any(s.sampling.seed is not None for s in sched.seqs))
    return runner


def sched(seed=None, computed=(3,)):
    """One sequence per entry of computed (its num_computed: 0 = a fresh prompt)."""
    seqs = [SimpleNamespace(sampling=SimpleNamespace(seed=seed), token_ids=[5], num_computed=c)
            for c in computed]
    return SimpleNamespace(seqs=seqs)


@pytest.mark.parametrize("seed,want", [(None, "plain"), (7, "invariant")])
def test_follower_replays_the_graph_of_the_steps_invariance(seed, want):
    graphs = {"plain": FakeGraph(True), "invariant": FakeGraph(True)}
    runner = fake_runner("seeded", graphs["plain"], graphs["invariant"])
    assert follower_step(runner, sched(seed), executor="decode_graph") == "decode_graph"
    assert graphs[want].ran == 1 and sum(g.ran for g in graphs.values()) == 1 and runner.eager == []


def test_follower_runs_what_the_leader_named():
    graph = FakeGraph(True)
    runner = fake_runner("off", graph, None)
    assert follower_step(runner, sched()) == "eager" and runner.eager == [1] and graph.ran == 0
    follower_step(runner, sched(computed=(0, 0)), executor="prefill_graph")
    assert runner.prefill_graphs.ran == [(2, (64, 1))] and graph.ran == 0
    follower_step(runner, sched(computed=(0, 9, 4)), executor="split_step")  # the prompt, then 2 decodes
    assert runner.prefill_graphs.ran[-1] == (1, (64, 1)) and (graph.ran, graph.rows) == (1, 2)
    assert runner.eager == [1]


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
        assert runner.pick(step) is not None and runner.pick(step).name == leader.name
        follower = fake_runner(policy, FakeGraph(eligible), FakeGraph(eligible))
        assert follower_step(follower, step, executor=leader.name) == leader.name
        graph = follower.graph_invariant if runner.step_is_invariant(step) else follower.graph
        assert graph.ran == (leader.name == "decode_graph") and follower.eager == [1] * (not graph.ran)
