import random

import pytest
from engine_fakes import EOS, fake_engine, reference, run_all, text_of, tokens_of

from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import ContextLengthExceededError, RequestError


def req(rid, prompt, **kw):
    return EngineRequest(rid, list(prompt), SamplingParams(**kw))


def workload(n=16, seed=0):
    rng = random.Random(seed)
    shared = [rng.randrange(1, 40) for _ in range(12)]
    reqs = []
    for i in range(n):
        prompt = (shared if i % 4 == 0 else []) + [rng.randrange(1, 40) for _ in range(rng.randrange(1, 40))]
        kw = dict(max_tokens=rng.randrange(1, 30))
        kw.update(temperature=0.0) if i % 2 else kw.update(temperature=0.8, seed=1000 + i)
        reqs.append(req(f"r{i}", prompt, **kw))
    return reqs


@pytest.mark.parametrize("num_blocks,budget", [(256, 2048), (256, 7), (24, 64)])
def test_concurrent_requests_equal_one_by_one(num_blocks, budget):
    engine, runner = fake_engine(num_blocks=num_blocks, eos_every=25, max_num_batched_tokens=budget)
    reqs = workload()
    for r in reqs:
        engine.add_request(r)
    events = run_all(engine)
    for r in reqs:
        evs = events[r.request_id]
        assert tokens_of(evs) == reference(r.prompt_token_ids, r.sampling, eos_every=25)
        assert [e.finished for e in evs] == [False] * (len(evs) - 1) + [True]
        assert [e.index for e in evs] == list(range(len(evs)))
        assert evs[-1].finish_reason == ("eos" if evs[-1].token_id == EOS else "length")
        assert evs[-1].generated_tokens == len(evs) and evs[-1].prompt_tokens == len(r.prompt_token_ids)
    assert engine.block_manager.num_used_blocks == 0
    st = engine.stats()
    assert st["running"] == st["waiting"] == st["kv_blocks_used"] == 0
    if num_blocks == 24:
        assert st["num_preemptions"] > 0
    assert st["prefix_cache_queries"] >= st["prefix_cache_hits"]
    if budget < 100:  # the shared prefix is computed before later requests are admitted: they hit it
        assert st["prefix_cache_hits"] > 0


def test_prefix_cache_hits_skip_computation():
    engine, runner = fake_engine(num_blocks=64, block_size=4)
    prompt = list(range(1, 22))
    engine.add_request(req("a", prompt, max_tokens=2, temperature=0.0))
    run_all(engine)
    computed_before = sum(s.num_tokens for s in runner.calls)
    engine.add_request(req("b", prompt, max_tokens=2, temperature=0.0))
    events = run_all(engine)
    assert tokens_of(events["b"]) == reference(prompt, SamplingParams(max_tokens=2, temperature=0.0))
    assert sum(s.num_tokens for s in runner.calls) - computed_before == 1 + 1  # last prompt token + decode
    assert engine.stats()["prefix_cache_hits"] == 20


def test_stop_string_is_held_back_and_not_emitted():
    # a=1 b=2 c=3 " "=27 "ab"=28 "xyz"=30: text "a" "b" " " "ab" "c" ...
    script = [1, 2, 27, 28, 3, 30, 1, 1, 1, 1]
    engine, _ = fake_engine(scripts={7: script})
    engine.add_request(req("s", [7, 8], max_tokens=10, stop=("abc",)))
    evs = run_all(engine)["s"]
    assert text_of(evs) == "ab "
    assert [e.text for e in evs] == ["", "", "ab ", "", ""]  # "a", "ab" could start "abc": held
    assert evs[-1].finish_reason == "stop" and evs[-1].token_id == 3 and evs[-1].generated_tokens == 5


def test_held_text_is_released_at_length_and_at_eos():
    engine, _ = fake_engine(scripts={7: [1, 2, 5, 5], 8: [1, EOS]})
    engine.add_request(req("len", [7], max_tokens=2, stop=("abc",)))
    engine.add_request(req("eos", [8], max_tokens=5, stop=("abc",)))
    events = run_all(engine)
    assert text_of(events["len"]) == "ab" and events["len"][-1].finish_reason == "length"
    assert text_of(events["eos"]) == "a" and events["eos"][-1].finish_reason == "eos"
    assert events["eos"][-1].token_id == EOS


def test_ignore_eos_and_stop_token_ids():
    engine, _ = fake_engine(scripts={7: [EOS, 1, 2, 3], 8: [1, 2, 3, 4]})
    engine.add_request(req("ign", [7], max_tokens=3, ignore_eos=True))
    engine.add_request(req("ids", [8], max_tokens=4, stop_token_ids=(3,)))
    events = run_all(engine)
    assert tokens_of(events["ign"]) == [EOS, 1, 2] and events["ign"][-1].finish_reason == "length"
    assert tokens_of(events["ids"]) == [1, 2, 3] and text_of(events["ids"]) == "ab"
    assert events["ids"][-1].finish_reason == "stop"


def test_abort_ends_with_cancelled_and_frees_blocks():
    engine, _ = fake_engine(num_blocks=64)
    engine.add_request(req("a", range(1, 30), max_tokens=50))
    engine.add_request(req("b", range(1, 5), max_tokens=3))
    engine.add_request(req("queued", range(1, 5), max_tokens=3))
    engine.step()
    engine.step()
    assert engine.block_manager.num_used_blocks > 0
    assert engine.abort("a") and engine.abort("queued") and not engine.abort("nope")
    evs = engine.step()
    cancelled = [e for e in evs if e.finish_reason == "cancelled"]
    assert {e.request_id for e in cancelled} == {"a", "queued"}
    assert all(e.token_id is None and e.finished for e in cancelled)
    run_all(engine)
    assert engine.block_manager.num_used_blocks == 0
    engine.block_manager.check_integrity([])


def test_runner_failure_ends_only_that_steps_requests():
    engine, runner = fake_engine()
    runner.fail_when = lambda s: s.token_ids[0] == 39
    engine.add_request(req("bad", [39, 1, 2], max_tokens=3))
    evs = engine.step()
    assert len(evs) == 1 and evs[0].finish_reason == "error" and "injected failure" in evs[0].error
    runner.fail_when = None
    engine.add_request(req("good", [1, 2], max_tokens=3, temperature=0.0))
    events = run_all(engine)
    assert tokens_of(events["good"]) == reference([1, 2], SamplingParams(max_tokens=3, temperature=0.0))
    assert engine.block_manager.num_used_blocks == 0


def test_validation_errors_name_the_numbers():
    engine, _ = fake_engine(num_blocks=64, block_size=4, context_length=100)
    with pytest.raises(ContextLengthExceededError, match=r"90 tokens.*20.*110.*100"):
        engine.add_request(req("x", [1] * 90, max_tokens=20))
    with pytest.raises(RequestError, match="empty"):
        engine.add_request(req("x", [], max_tokens=1))
    with pytest.raises(RequestError, match="vocabulary"):
        engine.add_request(req("x", [10_000], max_tokens=1))
    with pytest.raises(RequestError) as err:
        engine.add_request(req("x", [1], max_tokens=0))
    assert err.value.param == "max_tokens"
    small, _ = fake_engine(num_blocks=4, block_size=4)
    with pytest.raises(ContextLengthExceededError, match="KV cache capacity of 16"):
        small.add_request(req("x", [1] * 10, max_tokens=10))
    engine.add_request(req("dup", [1], max_tokens=1))
    with pytest.raises(RequestError, match="already"):
        engine.add_request(req("dup", [1], max_tokens=1))
    assert not engine.step() == []


def test_stop_string_inside_one_piece_and_several_stops():
    engine, _ = fake_engine(scripts={7: [1, 30, 2, 2], 8: [28, 28, 31, 1]})  # "a" "xyz" / "ab" "ab" "END"
    engine.add_request(req("mid", [7], max_tokens=4, stop=("y", "zz")))
    engine.add_request(req("two", [8], max_tokens=4, stop=("bE", "ba")))
    events = run_all(engine)
    assert text_of(events["mid"]) == "ax" and events["mid"][-1].finish_reason == "stop"
    assert text_of(events["two"]) == "a" and events["two"][-1].generated_tokens == 2


def test_random_adds_aborts_and_steps_keep_blocks_consistent():
    rng = random.Random(1)
    engine, _ = fake_engine(num_blocks=20, block_size=4, eos_every=30, max_num_batched_tokens=12,
                            max_num_seqs=6)
    reqs = {r.request_id: r for r in workload(40, seed=3)}
    pending, aborted, events = list(reqs.values()), set(), {}
    while pending or engine.has_work():
        if pending and rng.random() < 0.3:
            engine.add_request(pending.pop(0))
        live = [rid for rid in reqs if rid not in events or not events[rid][-1].finished]
        if live and rng.random() < 0.05:
            rid = rng.choice(live)
            if engine.abort(rid):
                aborted.add(rid)
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
        engine.block_manager.check_integrity(engine.scheduler.live_seqs())
    assert engine.block_manager.num_used_blocks == 0 and aborted
    for rid, r in reqs.items():
        want = reference(r.prompt_token_ids, r.sampling, eos_every=30)
        got = tokens_of(events[rid])
        assert events[rid][-1].finished
        if events[rid][-1].finish_reason == "cancelled":
            assert rid in aborted and got == want[: len(got)]
        else:
            assert got == want
