"""The fake engine of bench/serving (fake_engine.py, what serving_fake.py measures the HTTP layer with):
every request gets exactly max_tokens tokens, aborts end streams, and it runs as orcd's engine process
behind the real ProcessEngine."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from orcd.engine.core_client import ProcessEngine
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.hub import resolve_model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench/serving"))  # spawned ones inherit it
from fake_engine import FakeBuild, engine_alone  # noqa: E402

FAST = FakeBuild(resolve_model_path(None), base_ms=0.1, row_ms=0.0, prefill_ms=0.0, max_num_seqs=2,
                 max_num_batched_tokens=8)


def _req(rid: str, n: int, prompt: int = 4) -> EngineRequest:
    return EngineRequest(rid, [1] * prompt, SamplingParams(max_tokens=n))


def test_every_request_gets_its_tokens_and_aborts_end_streams():
    engine = FAST.build()
    for rid, n in (("a", 3), ("b", 1), ("c", 2), ("d", 5), ("e", 4)):
        engine.add_validated(_req(rid, n))
    events = engine.step()  # a, b run (max_num_seqs 2); c, d, e wait
    engine.abort("d")  # waiting
    engine.abort("a")  # running
    while engine.has_work():
        events += engine.step()
    finals = {e.request_id: e for e in events if e.finished}
    assert {rid: e.finish_reason for rid, e in finals.items()} == {
        "a": "cancelled", "b": "length", "c": "length", "d": "cancelled", "e": "length"}
    assert [e.index for e in events if e.request_id == "e"] == [0, 1, 2, 3]
    assert finals["e"].generated_tokens == 4 and finals["e"].prompt_tokens == 4
    assert engine_alone(FAST, streams=2, prompt_len=4, gen_len=3) > 0


def test_runs_as_the_engine_process_behind_process_engine():
    pe = ProcessEngine.spawn(FAST)

    async def main():
        pe.start()
        try:
            streams, out = [pe.generate(_req(f"r{i}", 3 + i)) for i in range(3)], []
            for stream in streams:  # each buffers its events meanwhile
                out.append([ev async for ev in stream])
            return out
        finally:
            await asyncio.to_thread(pe.shutdown)

    got = asyncio.run(main())
    assert [[e.index for e in evs if e.token_id is not None] for evs in got] == [
        list(range(3)), list(range(4)), list(range(5))]
    assert all(evs[-1].finished and evs[-1].finish_reason == "length" for evs in got)
    assert pe.process.exitcode == 0
