"""Grammar rows in the engine's overlap (orcd/engine/overlap.py): a step holding constrained rows queues its
forward before the step before's tokens advance the grammars, and draws its own tokens at the next step().
It must give the tokens and finish reasons of one step at a time -- greedy, seeded, top-p (masked first),
penalties with the last token still a placeholder, logprobs, stop tokens, aborts, preemption, requests
arriving -- through the eager executor and the decode-graph executor (graphs uncaptured on the CPU).
CPU, the tiny random model of conftest.py."""

from __future__ import annotations

import llguidance
import pytest

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.runner.decode_graphs import DecodeGraphs, table_width
from orcd.runner.model_runner import ModelRunner
from orcd.structured.grammars import json_schema_grammar, regex_grammar
from tests.structured.test_guided_engine import ENDLESS, SCHEMA

GRAMMARS = {"json": json_schema_grammar(SCHEMA, "s"), "re": regex_grammar("(ab|c)+d", "r")}
SAMPLINGS = {"greedy": dict(temperature=0.0), "seeded": dict(temperature=1.0, seed=11),
             "topp": dict(temperature=1.0, seed=12, top_p=0.9),
             "penalty": dict(temperature=0.0, repetition_penalty=4.0),
             "logprobs": dict(temperature=0.7, seed=13, logprobs=2)}


def requests(prompt: list[int], free: int = 2) -> list[EngineRequest]:
    reqs = [EngineRequest(f"{g}-{s}", prompt, SamplingParams(max_tokens=30, grammar=grammar, **kw))
            for g, grammar in GRAMMARS.items() for s, kw in SAMPLINGS.items()]
    reqs += [EngineRequest(f"free{i}", prompt[i:], SamplingParams(max_tokens=30, seed=i, ignore_eos=True))
             for i in range(free)]
    reqs.append(EngineRequest("stop", prompt, SamplingParams(max_tokens=30, temperature=0.0,
                                                             grammar=GRAMMARS["re"], stop_token_ids=[5, 9])))
    return reqs


def run(engine: LLMEngine, reqs: list[EngineRequest], aborts: dict[int, str] | None = None,
        later: list[EngineRequest] | None = None):
    """Per request (tokens, logprobs, finish reason); aborts: step -> request id; later: added at step 3."""
    for r in reqs:
        engine.add_request(r)
    out: dict[str, list] = {}
    reasons: dict[str, str] = {}
    step = 0
    while engine.has_work() or (later and step <= 3):
        if aborts and step in aborts:
            engine.abort(aborts[step])
        if later and step == 3:
            for r in later:
                engine.add_request(r)
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                lp = ev.logprobs
                out.setdefault(ev.request_id, []).append((ev.token_id, lp and (lp.logprob, lp.top)))
            if ev.finished:
                reasons[ev.request_id] = ev.finish_reason
        engine.block_manager.check_integrity(engine.scheduler.live_seqs())
        step += 1
    assert engine.block_manager.num_used_blocks == 0
    return out, reasons


def graph_engine(loaded, overlap: bool, num_blocks: int = 256) -> LLMEngine:
    """Decode steps through DecodeGraphExecutor: its launch path, the graph's static logits and input-id
    buffers read by the deferred draw."""
    runner = ModelRunner(loaded, num_blocks + 1, 16)  # + the scratch block
    buckets = (1, 2, 4, 8, 16)
    runner.graph = DecodeGraphs(loaded.model, runner.kv, 16, table_width(1024, 16), num_blocks, buckets)
    return LLMEngine(loaded, num_kv_blocks=num_blocks, runner=runner, overlap=overlap, max_num_seqs=16)


def assert_valid(engine: LLMEngine, out: dict[str, list]) -> None:
    """Every constrained output is a prefix its grammar allows (EOS only where it accepts)."""
    eos = engine.grammars().eos_ids
    for rid, toks in out.items():
        grammar = GRAMMARS.get(rid.split("-")[0]) if rid != "stop" else GRAMMARS["re"]
        if grammar is None:
            continue
        ids = [t for t, _ in toks]
        body = ids[:-1] if ids[-1] in eos else ids
        m = llguidance.LLMatcher(engine.grammars().lltok, grammar, log_level=0)
        assert m.validate_tokens(body) == len(body), rid


@pytest.mark.parametrize("executor", ["eager", "graph"])
def test_guided_steps_overlap_with_the_tokens_of_one_step_at_a_time(loaded, executor):
    prompt = loaded.tokenizer.encode("give me json")
    if executor == "eager":
        serial = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16, overlap=False)
        engine = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16)
    else:
        serial, engine = graph_engine(loaded, False), graph_engine(loaded, True)
    expected = run(serial, requests(prompt))
    got = run(engine, requests(prompt))
    assert got == expected
    assert engine.overlapped_steps > 10 and serial.overlapped_steps == 0
    assert_valid(engine, got[0])
    assert any(lp is not None for _, lp in got[0]["json-logprobs"])
    if executor == "graph":
        assert engine.runner.steps_by_executor.get("decode_graph", 0) > 10


def test_guided_overlap_under_aborts_arrivals_and_preemption(loaded):
    """Aborts while a guided step is in flight, requests arriving mid-run (a prefill step stops the
    overlap), and a KV cache small enough to preempt: the same tokens as one step at a time."""
    prompt = loaded.tokenizer.encode("give me json")

    def once(overlap: bool):
        engine = LLMEngine(loaded, num_kv_blocks=12, block_size=4, max_num_seqs=16, overlap=overlap)
        later = [EngineRequest(f"late-{r.request_id}", r.prompt_token_ids, r.sampling)
                 for r in requests(prompt, free=1)[:4]]
        return run(engine, requests(prompt), aborts={4: "json-greedy", 7: "free1"}, later=later), engine

    (expected, _), (got, engine) = once(False), once(True)
    assert got[1] == expected[1]
    for rid, pairs in got[0].items():  # an aborted request may get one token more or fewer, never others'
        toks, want = [t for t, _ in pairs], [t for t, _ in expected[0][rid]]
        if got[1][rid] == "cancelled":
            n = min(len(toks), len(want))
            toks, want = toks[:n], want[:n]
        assert toks == want, rid
        # logprobs: equal up to float rounding (a step's batch differs where an abort falls)
        for (_, lp), (_, lq) in zip(pairs, expected[0][rid], strict=False):
            assert (lp is None) == (lq is None)
            if lp is not None:
                assert lp[0] == pytest.approx(lq[0], abs=1e-5), rid
    assert engine.overlapped_steps > 0 and engine.stats()["num_preemptions"] > 0


@pytest.mark.gpu
def test_on_cuda_guided_overlap_equals_one_step_at_a_time(cuda_model):
    """CUDA decode graphs: the draw reads the graph's logits after the host has advanced the grammars,
    masks filled while the forward runs; 16 rows, 10 constrained (greedy, seeded, top-p, penalty), 6 free."""
    grammar = json_schema_grammar(ENDLESS, "s")
    kinds = [dict(temperature=0.0), dict(temperature=1.0, seed=3), dict(temperature=0.8, seed=4, top_p=0.9),
             dict(temperature=0.0, repetition_penalty=1.3)]

    def batch(overlap: bool):
        engine = LLMEngine(cuda_model, num_kv_blocks=256, max_num_seqs=16, enable_prefix_caching=False,
                           overlap=overlap)
        reqs = []
        for i in range(16):
            kw = kinds[i % 4] if i < 10 else dict(temperature=0.0, ignore_eos=True)
            sp = SamplingParams(max_tokens=32, grammar=grammar if i < 10 else None, **kw)
            reqs.append(EngineRequest(f"r{i}", [(5 * i + 3 * j) % 1000 + 1 for j in range(20)], sp))
        return run(engine, reqs)[0], engine

    (serial, _), (got, engine) = batch(False), batch(True)
    assert [t for t, _ in got["r0"]] and got.keys() == serial.keys()
    for rid in serial:
        assert [t for t, _ in got[rid]] == [t for t, _ in serial[rid]], rid
    assert engine.overlapped_steps > 20 and engine.runner.steps_by_executor.get("decode_graph", 0) > 20
