"""The engine's overlap (LLMEngine(overlap=True)): a decode step is launched before the step before it is
read, its input ids taken from that step's tokens on the device. It must give the tokens, finish reasons
and block accounting of one step at a time, with preemption, chunked prefill, aborts, stop tokens,
penalties (counted on the device for the token in flight) and logprobs (read with the tokens).
CPU, fp32, the real ModelRunner."""

import random

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.runner.decode_graphs import DecodeGraphs, table_width
from orcd.runner.model_runner import ModelRunner
from tests.engine.test_engine_e2e import IdTokenizer

VOCAB = 384  # IdTokenizer's


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = write_model_gguf(tmp_path_factory.mktemp("overlap") / "tiny.gguf", "qwen2", vocab_size=VOCAB,
                           hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=512,
                           seed=5)
    m = load_model(path, "cpu", tokenizer=False)
    m.tokenizer = IdTokenizer()
    yield m
    torch.set_num_threads(threads)


def workload(n=12, seed=0, penalties=False, logprobs=False):
    """Greedy and seeded sampled requests of varied lengths; stop tokens on some; optionally one with a
    penalty and one with logprobs (steps holding them run one at a time)."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        prompt = [rng.randrange(VOCAB - 1) for _ in range(rng.randrange(1, 50))]
        kw = dict(max_tokens=rng.randrange(1, 30))
        if i % 2:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=0.9, top_p=0.95, top_k=50, seed=100 + i)
        if i % 4 == 1:
            kw.update(stop_token_ids=[rng.randrange(VOCAB - 1) for _ in range(40)])
        if penalties and i == 4:
            kw.update(repetition_penalty=1.2)
        if logprobs and i == 5:
            kw.update(logprobs=2)
        reqs.append(EngineRequest(f"r{i}", prompt, SamplingParams(**kw)))
    return reqs


def run(engine: LLMEngine, reqs, abort_at: dict[int, str] | None = None):
    """Every request's (tokens, finish reason); aborts: step number -> request id."""
    for r in reqs:
        engine.add_request(r)
    toks: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    reasons: dict[str, str] = {}
    step = 0
    while engine.has_work():
        if abort_at and step in abort_at:
            engine.abort(abort_at[step])
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                toks[ev.request_id].append(ev.token_id)
            if ev.finished:
                reasons[ev.request_id] = ev.finish_reason
        engine.block_manager.check_integrity(engine.scheduler.live_seqs())
        step += 1
    assert engine.block_manager.num_used_blocks == 0
    return toks, reasons


def tokens_and_logprobs(engine: LLMEngine, reqs) -> dict[str, list]:
    """Per request, (token, (logprob, top) or None) for each of its tokens."""
    for r in reqs:
        engine.add_request(r)
    got: dict[str, list] = {}
    while engine.has_work():
        for ev in engine.step():
            if ev.token_id is not None:
                lp = ev.logprobs
                got.setdefault(ev.request_id, []).append((ev.token_id, lp and (lp.logprob, lp.top)))
    return got


@pytest.mark.parametrize("num_blocks,block_size,budget", [(256, 16, 2048), (256, 16, 40), (10, 16, 256),
                                                          (64, 4, 32)],
                         ids=["one-step-prefill", "chunked", "preempting", "small-blocks"])
def test_overlap_gives_the_tokens_of_one_step_at_a_time(loaded, num_blocks, block_size, budget):
    kw = dict(num_kv_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=budget)
    one_at_a_time = run(LLMEngine(loaded, overlap=False, **kw), workload())
    engine = LLMEngine(loaded, **kw)
    assert run(engine, workload()) == one_at_a_time
    assert engine.overlapped_steps > 0
    if num_blocks == 10:
        assert engine.stats()["num_preemptions"] > 0


def test_logprobs_of_overlapped_steps(loaded):
    """Logprobs are computed at launch and read with the tokens: the same values, penalties and all."""
    one_at_a_time = tokens_and_logprobs(LLMEngine(loaded, num_kv_blocks=128, overlap=False),
                                        workload(seed=1, penalties=True, logprobs=True))
    engine = LLMEngine(loaded, num_kv_blocks=128)
    assert tokens_and_logprobs(engine, workload(seed=1, penalties=True, logprobs=True)) == one_at_a_time
    assert engine.overlapped_steps > 0
    with_lp = one_at_a_time["r5"]
    assert len(with_lp) > 2 and all(lp is not None and len(lp[1]) == 2 for _, lp in with_lp)
    assert all(lp is None for rid, toks in one_at_a_time.items() if rid != "r5" for _, lp in toks)


@pytest.mark.parametrize("penalty", [dict(repetition_penalty=8.0), dict(presence_penalty=1.5),
                                     dict(frequency_penalty=2.0),
                                     dict(repetition_penalty=8.0, temperature=0.8, seed=9)])
def test_penalties_count_the_token_still_on_the_device(loaded, penalty):
    """Overlapped steps with penalties: the last token, a placeholder on the host, is counted from the
    step's input ids on the device, so the penalized tokens equal those of one step at a time."""
    def reqs():
        kw = dict(max_tokens=24, temperature=0.0) | penalty
        return [EngineRequest(f"p{i}", list(range(3 * i, 3 * i + 9)), SamplingParams(**kw)) for i in range(6)]

    one_at_a_time = run(LLMEngine(loaded, num_kv_blocks=64, overlap=False), reqs())
    engine = LLMEngine(loaded, num_kv_blocks=64)
    assert run(engine, reqs()) == one_at_a_time
    assert engine.overlapped_steps > 0
    plain = SamplingParams(max_tokens=24, temperature=0.0)
    unpenalized = run(LLMEngine(loaded, num_kv_blocks=64),
                      [EngineRequest(r.request_id, r.prompt_token_ids, plain) for r in reqs()])
    assert unpenalized != one_at_a_time  # the penalty changes the tokens: the test can see a miscount


def test_aborts_while_a_step_is_in_flight(loaded):
    aborts = {3: "r0", 4: "r3", 9: "r6"}
    reqs = [EngineRequest(f"r{i}", list(range(5 + i, 25 + i)),
                          SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)) for i in range(8)]
    one_at_a_time = run(LLMEngine(loaded, num_kv_blocks=64, overlap=False), reqs, aborts)
    engine = LLMEngine(loaded, num_kv_blocks=64)
    toks, reasons = run(engine, reqs, aborts)
    assert reasons == one_at_a_time[1]
    assert {r: reasons[r] for r in ("r0", "r3", "r6")} == dict.fromkeys(("r0", "r3", "r6"), "cancelled")
    # a cancelled request may get one token more or fewer (where the abort falls between steps), never
    # another request's: the others' tokens are the same
    for rid in toks:
        if reasons[rid] != "cancelled":
            assert toks[rid] == one_at_a_time[0][rid]
        else:
            assert toks[rid] == one_at_a_time[0][rid][: len(toks[rid])]


def test_requests_arriving_while_steps_overlap(loaded):
    """A request added mid-run stops the overlap for a step (its prompt is prefilled), then it resumes."""
    first, later = workload(n=6, seed=2), workload(n=6, seed=3)
    for i, r in enumerate(later):
        r.request_id = f"late{i}"

    def staggered(engine):
        for r in first:
            engine.add_request(r)
        toks: dict[str, list[int]] = {}
        step = 0
        while engine.has_work() or step < 4:
            if step == 3:
                for r in later:
                    engine.add_request(r)
            for ev in engine.step():
                assert ev.finish_reason != "error", ev.error
                if ev.token_id is not None:
                    toks.setdefault(ev.request_id, []).append(ev.token_id)
            step += 1
        return toks

    assert staggered(LLMEngine(loaded, num_kv_blocks=128)) == staggered(
        LLMEngine(loaded, num_kv_blocks=128, overlap=False))


def graph_engine(loaded, overlap: bool, num_blocks: int = 64) -> LLMEngine:
    """An engine whose decode steps take DecodeGraphExecutor (its graphs uncaptured on the CPU: the same
    step run eagerly on the static buffers), so the launch path with input ids from the device, the two
    staging sets and the penalties' input ids from the graph's buffer run here too."""
    runner = ModelRunner(loaded, num_blocks + 1, 16)  # + the scratch block
    runner.graph = DecodeGraphs(loaded.model, runner.kv, 16, table_width(512, 16), num_blocks, (1, 2, 4, 8))
    return LLMEngine(loaded, num_kv_blocks=num_blocks, runner=runner, overlap=overlap)


def test_decode_graph_executor_overlaps(loaded):
    def reqs():
        out = workload(n=8, seed=4)
        out[2].sampling = SamplingParams(max_tokens=20, temperature=0.0, repetition_penalty=8.0)
        return out

    one_at_a_time = run(graph_engine(loaded, overlap=False), reqs())
    engine = graph_engine(loaded, overlap=True)
    assert run(engine, reqs()) == one_at_a_time
    assert engine.overlapped_steps > 0 and engine.runner.steps_by_executor["decode_graph"] > 0
    assert run(LLMEngine(loaded, num_kv_blocks=64, overlap=False), reqs()) == one_at_a_time


def test_requests_ending_by_length_do_not_stop_the_overlap(loaded):
    """Sequences whose max_tokens ends them drop out of the next step: every decode step after the first
    is overlapped, and the tokens are those of one step at a time."""
    def reqs():
        return [EngineRequest(f"L{i}", list(range(10 + i, 30 + i)),
                              SamplingParams(max_tokens=5 + i, temperature=0.0, ignore_eos=True))
                for i in range(8)]

    one_at_a_time = run(LLMEngine(loaded, num_kv_blocks=64, overlap=False), reqs())
    engine = LLMEngine(loaded, num_kv_blocks=64)
    assert run(engine, reqs()) == one_at_a_time
    steps = engine.counters["steps"]  # one prefill step, then decode steps up to the longest (12 tokens)
    assert steps == 12 and engine.overlapped_steps == steps - 2
