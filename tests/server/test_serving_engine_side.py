"""The engine side of bench/serving (serving_engine.py) and the fake engine's graph model, on the CPU:
requests arrive at their times and get every token, prompts are the ids the server would prefill, a
row's ratio pairs each engine round with its HTTP round, and lazily captured prefill-graph buckets are
paid for once each (none when captured at start)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench/serving"))

from fake_engine import FakeBuild  # noqa: E402
from serving_engine import EngineReq, engine_requests, run_engine  # noqa: E402
from serving_load import body  # noqa: E402
from serving_run import fixed_row  # noqa: E402

from orcd.runner.prefill_graphs import SEQ_BUCKETS, TOKEN_BUCKETS, capture_plan  # noqa: E402

DEMO = REPO / "orcd/assets/demo.gguf"
FAST = FakeBuild(DEMO, base_ms=1.0, row_ms=0.0, prefill_ms=0.0, max_num_seqs=4, max_num_batched_tokens=64)


def test_requests_arrive_on_time_and_get_every_token():
    reqs = [EngineReq([1] * 5, 3, 0.0), EngineReq([1] * 7, 4, 0.4), EngineReq([1] * 2, 2, 0.2)]
    t0, results = run_engine(FAST.build(), reqs, "t")
    for r, res in zip(reqs, results, strict=True):
        assert res.error is None and res.tokens == r.max_tokens == len(res.stamps)
        assert r.at <= res.t_send - t0 < r.at + 0.15  # idle until each arrival (a loaded CI box: slack)
        assert res.t_send < res.stamps[0] <= res.stamps[-1] == res.t_end
    assert results[1].t_send > results[0].t_end  # the engine went idle between arrivals


def test_engine_prompts_are_what_the_server_prefills():
    from serving_client import Req

    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(DEMO).metadata)
    reqs = [Req("generate", body("generate", "hello there", 5, "m")),
            Req("chat", body("chat", "hello there", 6, "m"), at=1.5)]
    gen, chat = engine_requests(tok, reqs)
    assert gen == EngineReq(tok.encode_prompt("hello there"), 5, 0.0)
    assert chat == EngineReq(tok.encode_chat([{"role": "user", "content": "hello there"}]), 6, 1.5)
    assert len(chat.ids) > len(gen.ids)  # the chat template's tokens are prefilled too


def test_ratio_is_the_median_of_paired_rounds():
    https = [{"http_tok_s": x, "ttft_p50_ms": 1.0} for x in (90.0, 50.0, 100.0)]
    engines = [{"http_tok_s": x, "ttft_p50_ms": 2.0, "ttft_p99_ms": 3.0, "itl_p50_ms": 4.0, "itl_p99_ms": 5.0}
               for x in (100.0, 50.0, 200.0)]
    row = fixed_row("t", "m", "chat", 8, https, engines, busy=0.1)
    assert row["repeats_ratio"] == [0.9, 1.0, 0.5] and row["http_over_engine"] == 0.9
    assert row["engine_tok_s"] == 100.0 and row["http_tok_s"] == 90.0  # each side's median round
    assert fixed_row("t", "m", "chat", 8, https, [], busy=0.1)["http_over_engine"] is None


def test_fake_engine_pays_each_lazy_bucket_once_and_none_when_warm():
    lazy = FakeBuild(DEMO, capture_ms=1.0, warm_graphs=False, max_num_batched_tokens=2048).build()
    assert lazy.capture_s([100]) == 0.001 and lazy.capture_s([90]) == 0.0  # (128, 1) once
    assert lazy.capture_s([100, 100]) == 0.001  # (256, 4)
    assert lazy.capture_s([1] * 17) == 0.0  # more sequences than any bucket: eager, nothing captured
    assert lazy.counters["lazy_captures"] == 2
    t0 = time.perf_counter()
    warm = FakeBuild(DEMO, capture_ms=0.2, max_num_batched_tokens=2048).build()
    assert time.perf_counter() - t0 >= 0.2 * len(capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, 2048)) / 1000
    assert all(warm.capture_s([n] * k) == 0.0 for n in (5, 60, 500) for k in (1, 3, 4))


def test_fake_engine_pays_an_eager_step_only_for_a_cached_prefix_the_engine_takes():
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams

    def run(min_prefix_hit: int):
        engine = FakeBuild(DEMO, base_ms=0.0, row_ms=0.0, prefill_ms=0.0, eager_ms=1.0,
                           min_prefix_hit=min_prefix_hit).build()
        shared = list(range(1, 17))  # one full 16-token block, as a chat template's header
        for i, rid in enumerate(("a", "b", "c")):  # each arrives after the last one's first step
            engine.add_validated(EngineRequest(rid, shared + [100 + i] * 8, SamplingParams(max_tokens=3)))
            engine.step()
        engine.abort("c")
        while engine.has_work():
            engine.step()
        assert engine.prefix.bm.num_used_blocks == 0  # finished and aborted requests freed their blocks
        return engine.stats()

    before, after = run(0), run(64)
    assert before["eager_steps"] == 2 and before["prefix_cache_hits"] == 32
    assert after["eager_steps"] == 0 and after["prefix_cache_recomputed"] == 32
    assert after["prefix_cache_hits"] == 0 and after["generation_tokens"] == before["generation_tokens"]
