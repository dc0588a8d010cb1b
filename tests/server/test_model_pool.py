"""ModelPool's choices, in process with stand-in engines (no model, no HTTP): which model is unloaded to
make room, that a busy one is never unloaded, and what a failed load tells every waiting request."""

from __future__ import annotations

import asyncio
import types

import pytest

from orcd.server.errors import APIError
from orcd.server.model_pool import ModelPool, ModelSpec
from orcd.server.settings import ServerSettings


class StubEngine:
    def __init__(self, name: str):
        self.name, self.running = name, False
        self.tokenizer = types.SimpleNamespace(bos_id=None)
        self.device = "cpu"

    def start(self):
        self.running = True

    def shutdown(self):
        self.running = False

    def stats(self):
        return {"weights_bytes": 10, "kv_blocks_used": 0, "kv_blocks_total": 4, "prefix_cache_hits": 3}


def make_pool(names, max_loaded=1, fail=None, **settings) -> tuple[ModelPool, list[str]]:
    built: list[str] = []

    def build(spec):
        built.append(spec.name)
        if fail is not None and spec.name in fail:
            raise RuntimeError(fail[spec.name])
        return StubEngine(spec.name)

    return ModelPool([ModelSpec(n, None) for n in names], build,
                     ServerSettings(warmup=False, max_loaded_models=max_loaded, **settings)), built


def state(pool: ModelPool) -> dict[str, str]:
    return {name: slot.state for name, slot in pool.slots.items()}


async def done(task: asyncio.Future, timeout: float = 5.0) -> bool:
    await asyncio.wait({task}, timeout=timeout)
    return task.done()


def test_lru_prefers_an_idle_model_and_waits_for_a_busy_one():
    async def main():
        pool, built = make_pool(["a", "b", "c"], max_loaded=2)
        await pool.start()
        a = await pool.acquire("a")  # a stays busy
        await pool.load("b")
        c = asyncio.ensure_future(pool.acquire("c"))
        assert await done(c) and state(pool) == {"a": "loaded", "b": "unloaded", "c": "loaded"}  # b was idle
        pool.unpin(await c)
        b = asyncio.ensure_future(pool.acquire("b"))
        assert await done(b) and state(pool)["c"] == "unloaded"  # c idle again, a still busy: c goes
        d = asyncio.ensure_future(pool.acquire("c"))
        # both busy: a (the least recently used) is chosen, and waited for
        assert not await done(d, 0.3) and pool.slots["a"].draining
        pool.unpin(a)
        await asyncio.wait_for(d, 5)
        assert state(pool) == {"a": "unloaded", "b": "loaded", "c": "loaded"}
        assert built == ["a", "b", "c", "b", "c"]
        assert pool.stats()["prefix_cache_hits"] == 3 * 2 + 3 * 3  # two loaded + three retired engines
        await pool.shutdown()

    asyncio.run(main())


def test_failed_load_answers_every_waiter_and_retries_later():
    async def main():
        oom = {"oom": "CUDA out of memory. Tried to allocate 2.00 GiB"}
        pool, built = make_pool(["a", "oom"], max_loaded=0, fail=oom)
        await pool.start()
        results = await asyncio.gather(*(pool.acquire("oom") for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, APIError) and r.status == 503 and r.code == "insufficient_memory"
                   and r.headers["Retry-After"] for r in results)
        assert built == ["oom"] and pool.slots["oom"].error.startswith("CUDA out of memory")
        with pytest.raises(APIError, match="does not exist"):
            await pool.acquire("nope")
        await pool.acquire("a")
        with pytest.raises(APIError):
            await pool.acquire("oom")
        assert built == ["oom", "a", "oom"]
        await pool.shutdown()

    asyncio.run(main())


def test_idle_unload_and_a_pinned_single_model():
    async def main():
        pool, _ = make_pool(["a"], max_loaded=0, model_idle_timeout_s=0.1)
        await pool.start()
        await pool.load("a")
        for _ in range(100):  # the reaper looks every 25 ms; unloading runs in a thread
            await asyncio.sleep(0.05)
            if state(pool) == {"a": "unloaded"}:
                break
        assert state(pool) == {"a": "unloaded"}
        await pool.shutdown()
        single = ModelPool.single(StubEngine("s"), "s", ServerSettings(warmup=False))
        await single.start()
        with pytest.raises(APIError, match="only model"):
            await single.unload("s")
        await single.shutdown()

    asyncio.run(main())
