"""ProcessEngine (orcd.engine.core_client): the demo model's engine in a spawned process gives the same
events as AsyncEngine in this one; validation happens here, before anything is sent; the wire format
keeps every TokenEvent field."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from orcd.engine import ipc
from orcd.engine.async_engine import AsyncEngine, EngineStoppedError
from orcd.engine.core_client import ProcessEngine
from orcd.engine.core_process import EngineBuild
from orcd.engine.io import EngineRequest, TokenEvent, TokenLogprobs
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import ContextLengthExceededError, RequestError
from orcd.hub import resolve_model_path

BUILD = EngineBuild(resolve_model_path(None), device="cpu", num_kv_blocks=256)


def test_event_wire_round_trip():
    full = TokenEvent("r", 7, "é", 3, True, "stop", "boom", 11, 4,
                      TokenLogprobs(-0.5, [(7, -0.5), (9, -1.0)]), 0.25)
    for event in (full, TokenEvent("q", None, "", 0)):
        assert ipc.event_from_wire(ipc.loads(ipc.dumps(("step", [ipc.event_to_wire(event)], {})))[1][0]) \
            == event


def _requests() -> list[EngineRequest]:
    sp = SamplingParams(max_tokens=12, temperature=0.8, seed=3, ignore_eos=True, logprobs=2)
    return [EngineRequest(f"r{i}", [1, 2 + i, 3, 4 + i], dataclasses.replace(sp, seed=i)) for i in range(3)]


async def _collect(engine) -> list[list[TokenEvent]]:
    async def one(req):
        return [ev async for ev in engine.generate(req)]

    return list(await asyncio.gather(*(one(r) for r in _requests())))


def test_same_events_as_in_process():
    pe = ProcessEngine.spawn(BUILD)

    async def main():
        pe.start()  # on this loop: it reads the engine's socket
        try:
            assert pe.process.is_alive() and pe.device == "cpu" and pe.running
            assert pe.stats()["kv_blocks_total"] == 256
            events = await _collect(pe)
            with pytest.raises(ContextLengthExceededError):  # checked here, not in the engine process
                pe.generate(EngineRequest("long", [1] * 10, SamplingParams(max_tokens=10**6)))
            with pytest.raises(RequestError):
                pe.generate(EngineRequest("bad", [10**7], SamplingParams()))
            assert pe.stats()["requests_finished"] == 3
            return events
        finally:
            await asyncio.to_thread(pe.shutdown)

    got = asyncio.run(main())
    assert not pe.process.is_alive() and pe.process.exitcode == 0 and not pe.running
    ae = AsyncEngine(BUILD.build())
    ae.start()
    try:
        want = asyncio.run(_collect(ae))
    finally:
        ae.shutdown()

    def same(events):  # queue_s is a time: the rest must match field for field
        return [[dataclasses.replace(e, queue_s=None) for e in evs] for evs in events]

    assert same(got) == same(want)  # tokens, text, logprobs, finish reasons: all of it


def test_killed_engine_ends_streams_and_refuses():
    pe = ProcessEngine.spawn(BUILD)

    async def main():
        pe.start()
        try:
            long = SamplingParams(max_tokens=2000, ignore_eos=True)
            stream = pe.generate(EngineRequest("long", [1, 2], long))
            first = await anext(stream)
            pe.process.kill()
            rest = [ev async for ev in stream]
            with pytest.raises(EngineStoppedError):
                pe.generate(EngineRequest("after", [1], SamplingParams(max_tokens=1)))
            return first, rest
        finally:
            await asyncio.to_thread(pe.shutdown)

    first, rest = asyncio.run(asyncio.wait_for(main(), 60))
    assert first.token_id is not None
    assert rest[-1].finished and rest[-1].finish_reason == "error" and "exited" in rest[-1].error
