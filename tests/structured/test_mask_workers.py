"""Mask workers (GrammarBackend(fill_procs=N), orcd.structured.workers): masks filled by worker processes
equal the engine thread's on a random walk, matchers dropped by the engine are dropped there too, the engine
gives the same tokens with workers as without, and a worker that dies leaves the fills to the engine's
thread without changing a token."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.structured.backend import GrammarBackend
from orcd.structured.grammars import json_schema_grammar, regex_grammar

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "note": {"type": "string", "maxLength": 6}},
          "required": ["id", "note"], "additionalProperties": False}


def _allowed(row: torch.Tensor) -> list[int]:
    words = row.numpy()
    return [32 * w + b for w in range(len(words)) for b in range(32) if (int(words[w]) >> b) & 1]


@pytest.fixture(scope="module")
def remote(loaded):
    backend = GrammarBackend(loaded.tokenizer, fill_procs=2)
    yield backend
    if backend._workers is not None:
        backend._workers.close()


def test_worker_masks_equal_local_masks(loaded, remote):
    """Six rows (two grammars) walk random allowed tokens for 25 steps; every step's masks are equal."""
    local = GrammarBackend(loaded.tokenizer)
    grammars = [json_schema_grammar(SCHEMA, "s"), regex_grammar("(ab|c)+d", "r")] * 3
    ours, theirs = [local.matcher(g) for g in grammars], [remote.matcher(g) for g in grammars]
    assert remote.remote and all(m.unsent is not None for m in theirs)
    rng = random.Random(1)
    for step in range(25):
        mine, there = local.fill(ours), remote.fill(theirs)
        assert torch.equal(mine, there), step
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            t = rng.choice(_allowed(mine[i]))
            a.consume(t)
            b.consume(t)
    assert remote.workers_failed is None


def test_dropped_matchers_leave_the_workers(remote):
    workers = remote.workers()
    ms = [remote.matcher(regex_grammar("x+", "r")) for _ in range(3)]
    remote.fill(ms)
    keys = {m.key for m in ms}
    assert keys <= workers.known
    del ms
    gc.collect()
    remote.fill([remote.matcher(regex_grammar("y", "r"))])  # sends the drops
    assert not keys & workers.known


def _run(loaded, mask_workers: int, kill_after: int | None = None) -> tuple[dict, LLMEngine]:
    engine = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16, mask_workers=mask_workers)
    grammars = {"json": json_schema_grammar(SCHEMA, "s"), "re": regex_grammar("(ab|c)+d", "r")}
    samplings = {"greedy": dict(temperature=0.0), "seeded": dict(temperature=1.0, seed=11),
                 "topp": dict(temperature=1.0, seed=12, top_p=0.9)}
    reqs = {f"{g}-{s}": SamplingParams(max_tokens=30, grammar=grammar, **kw)
            for g, grammar in grammars.items() for s, kw in samplings.items()}
    reqs["free"] = SamplingParams(max_tokens=30, seed=3, ignore_eos=True)
    prompt = loaded.tokenizer.encode("give me json")
    for rid, sp in reqs.items():
        engine.add_request(EngineRequest(rid, prompt, sp))
    out: dict[str, list[int]] = {r: [] for r in reqs}
    steps = 0
    while engine.has_work():
        for ev in engine.step():
            assert not ev.error, ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
        steps += 1
        if steps == kill_after:
            engine.grammars()._workers.procs[0].kill()
    return out, engine


def test_engine_tokens_with_workers_equal_without(loaded):
    with_workers, engine = _run(loaded, 2)
    backend = engine.grammars()
    assert backend.remote and backend._workers is not None
    backend._workers.close()
    without, _ = _run(loaded, 0)
    assert with_workers == without


def test_a_dead_worker_leaves_the_masks_to_the_engine(loaded):
    """One worker killed after 5 steps: the next fill fails over to the engine's thread (logged), the
    tokens are those of the run without workers."""
    after, engine = _run(loaded, 2, kill_after=5)
    backend = engine.grammars()
    assert backend.workers_failed is not None and not backend.remote
    backend._workers.close()
    without, _ = _run(loaded, 0)
    assert after == without


def test_serve_option_parsed_refused_and_built(tiny_qwen2_gguf, capsys):
    """`orcd serve --mask-workers N` reaches the engine (its backend starts N workers at once); a
    negative or non-number is refused by name."""
    from orcd.cli.main import build_parser
    from orcd.cli.serve import engine_build

    parser = build_parser("serve")
    assert parser.parse_args(["serve"]).mask_workers == 0
    for bad in ("-1", "two", "65"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--mask-workers", bad])
        assert "--mask-workers: must be a whole number of processes from 0 to 64" in capsys.readouterr().err
    args = parser.parse_args(["serve", "--mask-workers", "1", "--device", "cpu"])
    build = engine_build(args, tiny_qwen2_gguf)
    engine = build.build()
    backend = engine.grammars()
    pool = backend.workers()
    assert backend.fill_procs == 1 and pool is not None and len(pool.procs) == 1 and pool.procs[0].is_alive()
    pool.close()


def test_workers_that_do_not_start_leave_the_masks_here(loaded, monkeypatch):
    """A start that fails is logged and given up: matchers and fills work on the engine's thread."""
    from orcd.structured import backend as be

    def broken(*args, **kwargs):
        raise RuntimeError("a mask worker did not start within 120 s")

    monkeypatch.setattr(be, "MaskWorkers", broken)
    backend = GrammarBackend(loaded.tokenizer, fill_procs=2)
    m = backend.matcher(regex_grammar("(ab|c)+d", "r"))
    assert backend.workers() is None and not backend.remote and "did not start" in backend.workers_failed
    assert m.unsent is None and _allowed(backend.fill([m])[0])
