"""Several models in one worker: a ModelPool of named slots, each loaded on demand into its own
engine (an AsyncEngine: its own step-loop thread; or with --engine-process a ProcessEngine: its own
process), unloaded when least recently used past `max_loaded_models`,
when idle past `model_idle_timeout_s`, or on request.

All pool state lives on the server's event loop; loading and unloading run in worker threads. A slot
is pinned while requests use it (a route's lease while it prepares a request, then one pin per admitted
job): a pinned slot is never unloaded. A slot chosen for unloading is `draining`: new requests for it
wait until it is gone (and load it again), so a busy model cannot starve the others.
"""


from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from orcd.errors import OrcdError
from orcd.server.errors import APIError
from orcd.server.model_slot import (
    LOADED,
    LOADING,
    UNLOADED,
    UNLOADING,
    ModelSlot,
    ModelSpec,
    free_device_memory,
    load_error,
    warmup,
)
from orcd.server.settings import ServerSettings

__all__ = ["ModelPool", "ModelSlot", "ModelSpec"]

log = logging.getLogger("orcd.server")


class ModelPool:
    """`build(spec) -> AsyncEngine | ProcessEngine` (blocking, run in a thread) makes a slot's engine."""

    def __init__(self, specs: list[ModelSpec], build: Callable | None, settings: ServerSettings,
                 engine=None):
        self.slots = {s.name: ModelSlot(s, engine) for s in specs}
        self.default = specs[0].name
        self._build = build
        self.settings = settings
        self.closed = False
        self.retired_prefix_hits = 0  # from engines since unloaded: the server counter never goes back
        self.on_event: Callable[[str, str, str], None] = lambda name, event, reason: None
        self._changed: asyncio.Event | None = None
        self._reaper: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    def single(cls, engine, name: str, settings: ServerSettings) -> ModelPool:
        return cls([ModelSpec(name, None)], None, settings, engine=engine)

    @property
    def multi(self) -> bool:
        return self._build is not None

    # --- lookup -------------------------------------------------------------------------------
    def slot(self, name: str | None) -> ModelSlot:
        """The slot a request names (None: the default model); 404 naming `model` otherwise."""
        slot = self.slots.get(self.default if name is None else name)
        if slot is None:
            served = ", ".join(repr(n) for n in self.slots)
            raise APIError(404, f"model {name!r} does not exist; this server serves {served}",
                           param="model", code="model_not_found")
        return slot

    _SUMMED = ("weights_bytes", "kv_cache_bytes", "kv_capacity_tokens", "kv_blocks_total", "kv_blocks_used",
               "running", "waiting", "prefix_cache_hits")

    def stats(self) -> dict:
        """Engine stats: the model's own with one model, else summed over the loaded models."""
        if not self.multi:
            return next(iter(self.slots.values())).stats()
        total: dict = {key: 0 for key in self._SUMMED}
        for slot in self.slots.values():
            for key, value in slot.stats().items():
                if key in total and value is not None:
                    total[key] += value
        total["prefix_cache_hits"] += self.retired_prefix_hits
        return total

    def model_rows(self) -> list[tuple[str, str, int, dict]]:
        """(name, state, requests in flight, engine stats) per model, for /metrics and /health."""
        return [(s.name, s.state, s.jobs, s.stats()) for s in self.slots.values()]

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        for slot in self.slots.values():
            if slot.engine is not None:
                slot.engine.start()
                if self.settings.warmup:
                    await warmup(slot.engine)
        if self.settings.model_idle_timeout_s is not None and self.multi:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())

    def close(self) -> None:
        """No new leases (draining): waiting requests get 503; requests in flight run on."""
        self.closed = True
        self._notify()

    async def shutdown(self) -> None:
        self.close()
        if self._reaper is not None:
            self._reaper.cancel()
        loads = [s.load_task for s in self.slots.values() if s.load_task is not None]
        await asyncio.gather(*loads, *self._tasks, return_exceptions=True)
        for slot in self.slots.values():
            if slot.engine is not None:
                await asyncio.to_thread(slot.engine.shutdown)

    # --- leases -------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lease(self, name: str | None) -> AsyncIterator[ModelSlot]:
        """The named slot, loaded and pinned while the block runs."""
        slot = await self.acquire(name)
        try:
            yield slot
        finally:
            self.unpin(slot)

    async def acquire(self, name: str | None) -> ModelSlot:
        """Wait until the slot is loaded (loading it, making room first if needed), then pin it."""
        slot = self.slot(name)
        slot.waiting += 1
        try:
            while True:
                if slot.state == LOADED and not slot.draining:
                    self.pin(slot)  # while draining, JobHub.admit refuses it (and counts it)
                    return slot
                if self.closed:  # no loading while the server shuts down
                    raise APIError(503, "server is shutting down", code="server_shutting_down",
                                   headers={"Retry-After": str(self.settings.retry_after_s)})
                if slot.state == UNLOADED:
                    if self._room():
                        self._start_load(slot)
                    else:
                        self._make_room()
                if slot.state == LOADING and slot.load_task is not None:
                    await asyncio.shield(slot.load_task)  # a failed load raises here, for every waiter
                    continue
                await self._wait()
        finally:
            slot.waiting -= 1
            self._notify()

    def pin(self, slot: ModelSlot) -> None:
        slot.pins += 1
        slot.last_used = time.monotonic()

    def unpin(self, slot: ModelSlot) -> None:
        slot.pins -= 1
        slot.last_used = time.monotonic()
        if slot.pins == 0 and slot.draining and slot.state == LOADED:
            self._spawn(self._unload(slot, slot.drain_reason))
        self._notify()

    # --- explicit load / unload ---------------------------------------------------------------
    async def load(self, name: str) -> ModelSlot:
        async with self.lease(name) as slot:
            return slot

    async def unload(self, name: str) -> ModelSlot:
        """Unload now, or as soon as its requests in flight have finished (new ones wait meanwhile)."""
        slot = self.slot(name)
        if slot.pinned:
            raise APIError(400, f"model {name!r} is the only model of this server (started with one "
                           "--model and no --models-dir): it stays loaded", param="model",
                           code="model_pinned")
        while slot.state != UNLOADED:
            if slot.state == LOADING and slot.load_task is not None:
                with contextlib.suppress(APIError):
                    await asyncio.shield(slot.load_task)
                continue
            if slot.state == LOADED and not slot.draining:
                slot.draining, slot.drain_reason = True, "request"
                if slot.pins == 0:
                    self._spawn(self._unload(slot, "request"))
            await self._wait()
        return slot

    # --- internals ----------------------------------------------------------------------------
    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _room(self) -> bool:
        limit = self.settings.max_loaded_models
        held = sum(1 for s in self.slots.values() if s.state != UNLOADED)
        return limit <= 0 or held < limit

    def _make_room(self) -> None:
        """Choose the least recently used loaded model (idle ones first) to unload, unless one is
        already on its way out. Models that requests are about to pin are never chosen."""
        if any(s.draining or s.state in (UNLOADING, LOADING) for s in self.slots.values()):
            return
        candidates = [s for s in self.slots.values()
                      if s.state == LOADED and not s.pinned and s.waiting == 0]
        if not candidates:
            return
        victim = min(candidates, key=lambda s: (s.pins > 0, s.last_used))
        victim.draining, victim.drain_reason = True, "lru"
        log.info("model %s will be unloaded to make room (%d request(s) in flight)", victim.name, victim.pins)
        if victim.pins == 0:
            self._spawn(self._unload(victim, "lru"))

    def _start_load(self, slot: ModelSlot) -> None:
        slot.state, slot.error = LOADING, None
        task = asyncio.get_running_loop().create_task(self._load(slot))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
        slot.load_task = task

    async def _load(self, slot: ModelSlot) -> None:
        t0, engine = time.perf_counter(), None
        log.info("loading model %s from %s", slot.name, slot.spec.path)
        try:
            engine = await asyncio.to_thread(self._build, slot.spec)
            engine.start()
            if self.settings.warmup:
                await warmup(engine)
        except Exception as err:
            if isinstance(err, OrcdError):  # a bad file: its one-line message says it all
                log.error("loading model %s failed: %s", slot.name, err)
            else:
                log.exception("loading model %s failed", slot.name)
            if engine is not None:
                await asyncio.to_thread(engine.shutdown)
            slot.state, slot.error, slot.load_task = UNLOADED, str(err).splitlines()[0] if str(err) else \
                type(err).__name__, None
            self.on_event(slot.name, "load_failed", "")
            self._notify()
            raise load_error(slot.name, err, self.settings.retry_after_s) from err
        slot.attach(engine)
        slot.load_seconds = time.perf_counter() - t0
        slot.state, slot.load_task, slot.last_used = LOADED, None, time.monotonic()
        log.info("model %s loaded in %.2f s", slot.name, slot.load_seconds)
        self.on_event(slot.name, "load", "")
        self._notify()

    async def _unload(self, slot: ModelSlot, reason: str) -> None:
        if slot.state != LOADED or slot.pins:
            return
        slot.state = UNLOADING
        self._notify()
        engine, device = slot.engine, getattr(slot.engine, "device", "")
        self.retired_prefix_hits += int(slot.stats().get("prefix_cache_hits") or 0)
        try:
            await asyncio.to_thread(engine.shutdown)
        finally:
            slot.engine = slot.token_names = engine = None
            await asyncio.to_thread(free_device_memory, device)
            slot.state, slot.draining = UNLOADED, False
            log.info("model %s unloaded (%s)", slot.name, reason)
            self.on_event(slot.name, "unload", reason)
            self._notify()

    async def _reap_idle(self) -> None:
        timeout = float(self.settings.model_idle_timeout_s)
        while True:
            await asyncio.sleep(min(1.0, max(timeout / 4, 0.05)))
            now = time.monotonic()
            for slot in self.slots.values():
                if slot.state == LOADED and not slot.pinned and not slot.draining and slot.pins == 0 \
                        and slot.waiting == 0 and now - slot.last_used >= timeout:
                    slot.draining, slot.drain_reason = True, "idle"
                    self._spawn(self._unload(slot, "idle"))
