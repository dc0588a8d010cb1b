"""The streaming hot path (issue 19): JobHub.event_batches awaits the engine's stream directly (no
asyncio Task per token), one ping timer per stream, the same events as the engine's own iterator."""

from __future__ import annotations

import asyncio

import pytest

from orcd.engine.async_engine import AsyncEngine
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model
from orcd.server.jobs import JobHub
from orcd.server.model_pool import ModelPool
from orcd.server.settings import ServerSettings
from orcd.server.sse import PingClock


@pytest.fixture(scope="module")
def aengine(tiny_model):
    engine = AsyncEngine(LLMEngine(load_model(tiny_model, device="cpu"), num_kv_blocks=256, max_num_seqs=8))
    engine.start()
    yield engine
    engine.shutdown()


def _count_tasks(loop: asyncio.AbstractEventLoop) -> list[int]:
    created = [0]

    def factory(loop, coro, **kw):
        created[0] += 1
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)
    return created


def test_event_batches_yield_the_engine_tokens_with_no_task_per_token(aengine):
    sp = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    settings = ServerSettings(ping_interval_s=5.0)
    hub = JobHub(ModelPool.single(aengine, "tiny", settings), settings)
    slot = hub.pool.slot(None)

    async def through_hub() -> tuple[list[int], list, int]:
        created = _count_tasks(asyncio.get_running_loop())
        job = hub.admit(slot, "generate", [1, 2, 3], sp)
        batches = [b async for b in hub.event_batches(job)]
        ids = [ev.token_id for b in batches if b for ev in b if ev.token_id is not None]
        return ids, batches, created[0]

    async def direct() -> list[int]:
        return [ev.token_id async for ev in aengine.generate(EngineRequest("ref", [1, 2, 3], sp))
                if ev.token_id is not None]

    ids, batches, tasks = asyncio.run(through_hub())
    assert ids == asyncio.run(direct()) and len(ids) == 40
    assert None not in batches and batches[-1][-1].finished and batches[-1][-1].finish_reason == "length"
    assert tasks == 0  # the old path made one Task (and one timer) per lone event: ~40 here
    assert not hub.active and slot.jobs == 0  # released exactly once


def test_ping_clock_resolves_a_silent_wait_once_per_interval_and_touch_defers_it():
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        clock = PingClock(loop, 0.05)
        t0, fired = loop.time(), []
        try:
            for _ in range(3):
                clock.pending = fut = loop.create_future()
                assert await fut is False
                fired.append(loop.time() - t0)
            clock.touch()  # events just came: the next ping is a full interval from now
            clock.pending = fut = loop.create_future()
            loop.call_later(0.03, fut.set_result, True)  # an event before the interval is up
            assert await fut is True
        finally:
            clock.close()
        return fired

    fired = asyncio.run(main())
    assert fired[0] >= 0.045 and all(b - a >= 0.045 for a, b in zip(fired, fired[1:], strict=False))
    assert fired[-1] < 1.0


def test_a_ping_leaves_the_request_running(aengine):
    """A wait resolved by the ping clock (False) is not a cancel: the stream still ends normally."""
    sp = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)

    async def main() -> list:
        stream = aengine.generate(EngineRequest("pinged", [4, 5], sp))
        fut = stream.wait()
        if not fut.done():
            fut.set_result(False)  # what PingClock does
        events = []
        while not stream.finished:
            await stream.wait()
            events += stream.ready()
        return events

    events = asyncio.run(main())
    assert sum(ev.token_id is not None for ev in events) == 12 and events[-1].finish_reason == "length"
