"""One engine process, several clients (orcd serve --api-processes): each client's request ids are its
own (the same ids on two clients run as two requests, each stream getting its own events); a client
whose socket closes has its requests aborted and their KV blocks freed while the others keep being
served; the process exits once its last client leaves."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import time

from orcd.engine.core_client import ProcessEngine
from orcd.engine.core_process import EngineBuild, engine_main
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.hub import resolve_model_path

BUILD = EngineBuild(resolve_model_path(None), device="cpu", num_kv_blocks=256)


def _requests() -> list[EngineRequest]:
    sp = SamplingParams(max_tokens=10, temperature=0.8, ignore_eos=True)
    return [EngineRequest(f"r{i}", [1, 2 + i, 3, 4 + i], dataclasses.replace(sp, seed=i)) for i in range(3)]


async def _run_all(engine) -> list[list[tuple]]:
    async def one(req):
        return [(e.request_id, e.token_id, e.text, e.finish_reason) async for e in engine.generate(req)]

    return list(await asyncio.gather(*(one(r) for r in _requests())))


async def _until(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_two_clients_one_engine():
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe(duplex=True) for _ in range(2)]
    proc = ctx.Process(target=engine_main, args=([p[1] for p in pipes], BUILD), daemon=True)
    proc.start()
    for _, child in pipes:
        child.close()
    a, b = (ProcessEngine(BUILD.path, conn) for conn, _ in pipes)

    async def main():
        a.start()
        b.start()
        got_a, got_b = await asyncio.gather(_run_all(a), _run_all(b))  # the same ids on both clients
        assert got_a == got_b and [evs[-1][3] for evs in got_a] == ["length"] * 3
        assert [{e[0] for e in evs} for evs in got_a] == [{"r0"}, {"r1"}, {"r2"}]
        long = a.generate(EngineRequest("long", [1, 2], SamplingParams(max_tokens=2000, ignore_eos=True)))
        await anext(long)
        await _until(lambda: b.stats()["running"] == 1)  # b hears the engine's stats too
        a._loop.remove_reader(a._conn.fileno())
        a._conn.close()  # client a is gone without a word: its request is aborted, its blocks freed
        await _until(lambda: b.stats()["running"] == 0 and b.stats()["kv_blocks_used"] == 0)
        assert proc.is_alive()
        assert await _run_all(b) == got_b  # b is still served, tokens unchanged
        await asyncio.to_thread(b.shutdown)

    asyncio.run(asyncio.wait_for(main(), 120))
    proc.join(timeout=30)
    assert proc.exitcode == 0  # its last client said stop
