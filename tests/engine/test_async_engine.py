import asyncio
import gc
import time

import pytest
from engine_fakes import fake_engine, reference, tokens_of

from orcd.engine.async_engine import AsyncEngine, EngineStoppedError
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import ContextLengthExceededError


def req(rid, prompt, **kw):
    return EngineRequest(rid, list(prompt), SamplingParams(**kw))


@pytest.fixture
def aengine():
    engine, runner = fake_engine(num_blocks=64, block_size=4, context_length=200)
    ae = AsyncEngine(engine, model_name="fake")
    ae.start()
    yield ae
    ae.shutdown()


def wait_idle(ae: AsyncEngine, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = ae.stats()
        if st["running"] == st["waiting"] == st["kv_blocks_used"] == 0 and ae.num_active() == 0:
            return st
        time.sleep(0.01)
    raise AssertionError(f"engine not idle: {ae.stats()}")


def test_concurrent_streams_equal_reference(aengine):
    reqs = [req(f"r{i}", range(1, 3 + i), max_tokens=5 + i, temperature=0.7, seed=i) for i in range(8)]

    async def collect(r):
        return [ev async for ev in aengine.generate(r)]

    async def main():
        return await asyncio.gather(*(collect(r) for r in reqs))

    results = asyncio.run(main())
    for r, evs in zip(reqs, results, strict=True):
        assert tokens_of(evs) == reference(r.prompt_token_ids, r.sampling)
        assert evs[-1].finished and evs[-1].finish_reason == "length"
    assert aengine.model_name == "fake" and aengine.architecture == "fake"
    st = wait_idle(aengine)
    assert st["requests_finished"] == 8 and st["weights_bytes"] == 123


def test_validation_error_raises_before_any_event(aengine):
    async def main():
        with pytest.raises(ContextLengthExceededError):
            aengine.generate(req("x", [1] * 150, max_tokens=100))
        it = await aengine.generate(req("ok", [1], max_tokens=1))  # awaitable form works too
        return [ev async for ev in it]

    assert len(asyncio.run(main())) == 1


def test_leaving_the_iterator_early_cancels_and_frees(aengine):
    async def main():
        stream = aengine.generate(req("long", range(1, 20), max_tokens=150))
        async for ev in stream:
            if ev.index == 3:
                break
        await stream.aclose()

    asyncio.run(main())
    wait_idle(aengine)


def test_client_disconnect_cancels_the_task(aengine):
    async def consume(started: asyncio.Event):
        async for _ in aengine.generate(req("long", range(1, 20), max_tokens=150)):
            started.set()
            await asyncio.sleep(0.01)

    async def main():
        started = asyncio.Event()
        task = asyncio.create_task(consume(started))
        await started.wait()
        task.cancel()  # what the server does when the client goes away
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    wait_idle(aengine)


def test_dropped_stream_is_cancelled(aengine):
    async def main():
        aengine.generate(req("dropped", range(1, 20), max_tokens=150))
        gc.collect()

    asyncio.run(main())
    wait_idle(aengine)


def test_cancel_by_id_gives_a_cancelled_final_event():
    engine, runner = fake_engine(num_blocks=64, block_size=4, context_length=200)
    runner.delay_s = 0.01  # 150 tokens take 1.5 s: the cancel always lands before the natural end
    aengine = AsyncEngine(engine, model_name="fake")
    aengine.start()

    async def main():
        evs = []
        async for ev in aengine.generate(req("c", range(1, 5), max_tokens=150)):
            evs.append(ev)
            if len(evs) == 2:
                assert aengine.cancel("c")
        assert not aengine.cancel("c") and not aengine.cancel("unknown")
        return evs

    try:
        evs = asyncio.run(main())
        assert evs[-1].finish_reason == "cancelled" and evs[-1].token_id is None
        wait_idle(aengine)
    finally:
        aengine.shutdown()


def test_shutdown_ends_the_rest_as_cancelled_and_refuses_new_requests():
    engine, runner = fake_engine(num_blocks=64, block_size=4)
    runner.delay_s = 0.01  # 150 tokens take 1.5 s: shutdown comes long before the end
    ae = AsyncEngine(engine)
    ae.start()

    async def main():
        stream = ae.generate(req("s", range(1, 5), max_tokens=150))
        first = await stream.__anext__()
        await asyncio.to_thread(ae.shutdown)
        rest = [ev async for ev in stream]
        with pytest.raises(EngineStoppedError):
            ae.generate(req("late", [1], max_tokens=1))
        return [first, *rest]

    evs = asyncio.run(main())
    assert evs[-1].finish_reason == "cancelled"
    assert engine.block_manager.num_used_blocks == 0


def test_shutdown_with_grace_lets_running_requests_finish():
    engine, runner = fake_engine(num_blocks=64, block_size=4)
    ae = AsyncEngine(engine)
    ae.start()

    async def main():
        stream = ae.generate(req("s", range(1, 5), max_tokens=5))
        first = await stream.__anext__()
        await asyncio.to_thread(ae.shutdown, 30.0)
        return [first, *[ev async for ev in stream]]

    evs = asyncio.run(main())
    assert evs[-1].finish_reason == "length" and len(evs) == 5


def test_a_broken_step_ends_requests_with_error_and_the_engine_lives_on(aengine):
    runner = aengine.engine.runner
    calls = 0

    def broken_update(*args):
        nonlocal calls
        calls += 1
        raise ValueError("bug in update")

    update = aengine.engine.scheduler.update
    aengine.engine.scheduler.update = broken_update

    async def collect(r):
        return [ev async for ev in aengine.generate(r)]

    evs = asyncio.run(collect(req("x", [1, 2], max_tokens=3)))
    assert evs[-1].finish_reason == "error" and "bug in update" in evs[-1].error
    aengine.engine.scheduler.update = update
    evs = asyncio.run(collect(req("y", [1, 2], max_tokens=3, temperature=0.0)))
    assert tokens_of(evs) == reference([1, 2], SamplingParams(max_tokens=3, temperature=0.0))
    assert runner is aengine.engine.runner and calls == 1
    wait_idle(aengine)


def test_ready_drains_delivered_events_in_order_and_stops_at_the_final_one(aengine):
    r = req("batched", [1, 2, 3], max_tokens=12, temperature=0.0)

    async def main():
        stream = aengine.generate(r)
        await asyncio.sleep(0.2)  # let several steps' events arrive (each step: one loop callback)
        events = stream.ready()
        while not stream.finished:
            events.append(await stream.__anext__())
            events += stream.ready()
        assert stream.ready() == []
        return events

    evs = asyncio.run(main())
    assert tokens_of(evs) == reference(r.prompt_token_ids, r.sampling)
    assert [e.finished for e in evs] == [False] * (len(evs) - 1) + [True]
    wait_idle(aengine)
