"""Admission, streaming and cancellation of generation requests, shared by every route.

A Job is one admitted request. JobHub.event_batches() drives the engine's async iterator and yields
lists of its TokenEvents, or None when `ping_interval_s` passes without one (the route writes a ping).
Every way out (end, error, disconnect, cancel) passes through one `finally` that cancels the engine
request if it is still running and releases the Job exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio

from orcd.engine.async_engine import EngineStoppedError
from orcd.engine.io import EngineRequest, TokenEvent
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import RequestError
from orcd.server.errors import APIError, context_overflow
from orcd.server.metrics import ServerMetrics
from orcd.server.model_pool import ModelPool, ModelSlot
from orcd.server.settings import ServerSettings
from orcd.server.sse import PingClock

log = logging.getLogger("orcd.server")


@dataclass
class Job:
    request_id: str
    route: str
    prompt_ids: list[int]
    sampling: SamplingParams
    slot: ModelSlot  # the model it runs on (pinned until the job is released)
    t_start: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float | None = None
    tokens_out: int = 0
    finish_reason: str | None = None
    error: str | None = None
    cancel_requested: bool = False
    released: bool = False
    stream: object = None  # the engine's async iterator of TokenEvents
    opens: asyncio.Event | None = None  # set at this job's first events (or its end): forks wait for it
    parent: str | None = None  # a fork (choice i > 0, orcd.server.fork): the request_id of choice 0

    @property
    def ttft_ms(self) -> float | None:
        return None if self.t_first is None else round((self.t_first - self.t_start) * 1000, 3)

    @property
    def tokens_per_s(self) -> float | None:
        """Decode rate: tokens after the first over the time since the first (all tokens if only one)."""
        if self.t_first is None or self.t_last is None:
            return None
        if self.tokens_out > 1 and self.t_last > self.t_first:
            return round((self.tokens_out - 1) / (self.t_last - self.t_first), 3)
        return round(self.tokens_out / max(self.t_last - self.t_start, 1e-9), 3)


def new_request_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex


class JobHub:
    """Every admitted request of the server, over the models of `pool` (one engine per loaded model)."""

    def __init__(self, pool: ModelPool, settings: ServerSettings):
        self.pool = pool
        self.settings = settings
        self.active: dict[str, Job] = {}
        self.draining = False
        self.metrics = ServerMetrics(pool.stats, lambda: len(self.active), pool.model_rows,
                                     settings.metrics_dir)
        pool.on_event = self.metrics.model_event

    # --- engine facts -------------------------------------------------------------------------
    @staticmethod
    def context_length(slot: ModelSlot) -> int:
        """Tokens one request may span: the model context, or less when the KV pool is smaller."""
        return int(slot.stats().get("max_model_len") or slot.engine.config.context_length)

    def capacity(self, slot: ModelSlot) -> int:
        """Requests of one model admitted at once: its running slots plus the queue beyond them."""
        slots = slot.stats().get("max_num_seqs") or getattr(slot.engine, "max_num_seqs", 0) or 0
        return int(slots) + self.settings.max_queue

    # --- admission ----------------------------------------------------------------------------
    def resolve_max_tokens(self, slot: ModelSlot, requested: int | None, n_prompt: int, default: int | None,
                           prompt_param: str, max_param: str = "max_tokens") -> int:
        """The max_tokens a request runs with. `prompt_param` / `max_param` name the fields an error
        points at (chat: `messages`, and `max_completion_tokens` when that is what the client sent)."""
        ctx = self.context_length(slot)
        what = "messages" if prompt_param == "messages" else "prompt"
        if ctx - n_prompt < 1:
            raise context_overflow(ctx, n_prompt, None, what=what, param=prompt_param)
        if requested is None:
            return ctx - n_prompt if default is None else min(default, ctx - n_prompt)
        if requested < 1:
            raise RequestError(f"{max_param}={requested} must be at least 1", param=max_param)
        if n_prompt + requested > ctx:
            raise context_overflow(ctx, n_prompt, requested, what=what, param=max_param)
        return requested

    def admit(self, slot: ModelSlot, route: str, prompt_ids: list[int], sampling: SamplingParams,
              request_id: str | None = None, prefix: str = "", *, reserve: int = 1, stream=None) -> Job:
        """Admit one request. `reserve`: requests about to be admitted together (the queue must hold
        them all); `stream(job)`: builds its event iterator instead of engine.generate (orcd.server.fork)."""
        if self.draining:
            self.metrics.child(self.metrics.rejected, "draining").inc()
            raise APIError(503, "server is shutting down", code="server_shutting_down",
                           headers={"Retry-After": str(self.settings.retry_after_s)})
        if slot.jobs + reserve > self.capacity(slot):
            self.metrics.child(self.metrics.rejected, "queue_full").inc()
            raise APIError(503, f"server overloaded: {slot.jobs} requests in flight for {slot.name!r}",
                           code="overloaded", headers={"Retry-After": str(self.settings.retry_after_s)})
        self.check_request_id(request_id)
        job = Job(request_id or new_request_id(prefix), route, prompt_ids, sampling, slot)
        # The engine validates here (LLMEngine.validate, the one place), before any response byte is
        # sent: its errors become 4xx.
        try:
            job.stream = stream(job) if stream is not None else slot.engine.generate(
                EngineRequest(job.request_id, prompt_ids, sampling))
        except EngineStoppedError as err:
            raise APIError(503, str(err), code="server_shutting_down",
                           headers={"Retry-After": str(self.settings.retry_after_s)}) from err
        self.active[job.request_id] = job
        self.metrics.set_active(len(self.active))
        slot.jobs += 1
        self.pool.pin(slot)
        self.metrics.prompt_tokens.inc(len(prompt_ids))
        self.metrics.child(self.metrics.model_prompt_tokens, slot.name).inc(len(prompt_ids))
        return job

    def check_request_id(self, request_id: str | None) -> None:
        if request_id is not None and request_id in self.active:
            raise APIError(400, f"request_id {request_id!r} is already in use", param="request_id",
                           code="duplicate_request_id")

    def release(self, job: Job) -> None:
        if job.released:
            return
        job.released = True
        if job.opens is not None:
            job.opens.set()  # its forks must not wait for a job that is gone
        self.active.pop(job.request_id, None)
        self.metrics.set_active(len(self.active))
        if job.finish_reason is None:  # the response ended before its stream did (client gone early)
            self._engine_cancel(job)
        outcome = job.finish_reason or ("cancelled" if job.cancel_requested else "disconnected")
        self.metrics.child(self.metrics.requests, job.route, outcome).inc()
        self.metrics.child(self.metrics.model_requests, job.slot.name, job.route, outcome).inc()
        self.metrics.e2e.observe(time.perf_counter() - job.t_start)
        job.slot.jobs -= 1
        self.pool.unpin(job.slot)

    # --- cancellation -------------------------------------------------------------------------
    def cancel(self, request_id: str) -> bool:
        """Cancel a request, and the other choices of it when it has several (their parent)."""
        job = self.active.get(request_id)
        if job is None:
            return False
        forks = [j for j in self.active.values() if j.parent == request_id]
        for j in [job, *forks]:
            j.cancel_requested = True
            self._engine_cancel(j)
        return True

    def cancel_all(self) -> int:
        ids = list(self.active)
        for rid in ids:
            self.cancel(rid)
        return len(ids)

    @staticmethod
    def _engine_cancel(job: Job) -> None:
        try:
            job.slot.engine.cancel(job.request_id)
        except Exception:
            log.exception("engine.cancel(%s) failed", job.request_id)

    # --- streaming ----------------------------------------------------------------------------
    async def event_batches(self, job: Job) -> AsyncIterator[list[TokenEvent] | None]:
        """Engine events for `job`, in order, as lists: every event already delivered is taken at once
        (one write per list), a lone event is yielded as soon as it arrives. None whenever
        ping_interval_s passes without one. The last event yielded is always final (finished=True),
        synthesised if the engine's iterator just stops.

        A stream with ready() and wait() (the engine's RequestStream) is awaited directly, with one ping
        timer for its whole life; any other async iterator through a Task per event."""
        it = aiter(job.stream)
        ready = getattr(it, "ready", None)  # non-blocking drain, if the stream offers one
        wait = getattr(it, "wait", None) if ready is not None else None
        clock = PingClock(asyncio.get_running_loop(), self.settings.ping_interval_s)
        task: asyncio.Future | None = None
        try:
            while job.finish_reason is None:
                batch = ready() if ready is not None else []
                if not batch and wait is not None:
                    if getattr(it, "finished", False):  # over without a final event: say so
                        batch = [self._ended(job)]
                    else:
                        clock.pending = pending = wait()
                        if not await pending:  # interval_s without events
                            yield None
                        continue
                if not batch:
                    task = asyncio.ensure_future(anext(it))
                    while not (await asyncio.wait({task}, timeout=self.settings.ping_interval_s))[0]:
                        yield None
                    batch = [self._result(job, task)]
                    task = None
                    if ready is not None and not batch[0].finished:
                        batch += ready()
                clock.touch()
                self._record(job, batch)
                if job.opens is not None:
                    job.opens.set()  # prefilled: its prompt blocks are in the prefix cache now
                yield batch
        finally:
            clock.close()
            with anyio.CancelScope(shield=True):
                if job.finish_reason is None:
                    self._engine_cancel(job)  # disconnect: free the sequence now
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            self.release(job)

    @staticmethod
    def _ended(job: Job) -> TokenEvent:
        """The final event of a stream that stopped without one."""
        return TokenEvent(job.request_id, None, "", job.tokens_out, finished=True,
                          finish_reason="cancelled" if job.cancel_requested else "error",
                          error=None if job.cancel_requested else "generation ended early")

    def _result(self, job: Job, task: asyncio.Future) -> TokenEvent:
        try:
            return task.result()
        except StopAsyncIteration:
            return self._ended(job)
        except Exception as err:  # engine failure inside this request only
            log.exception("request %s failed in the engine", job.request_id)
            return TokenEvent(job.request_id, None, "", job.tokens_out, finished=True,
                              finish_reason="error", error=str(err).splitlines()[0] if str(err)
                              else type(err).__name__)

    async def collect(self, jobs: list[Job], receive) -> list[list[TokenEvent]]:
        """Every event of non-streamed jobs (the choices of one request), side by side. A client that
        disconnects meanwhile (seen through the ASGI `receive`, the request body having been read
        already) cancels them all."""
        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            for job in jobs:
                self.cancel(job.request_id)

        async def gather(job: Job) -> list[TokenEvent]:
            async with contextlib.aclosing(self.event_batches(job)) as batches:
                return [ev async for batch in batches if batch is not None for ev in batch]

        watcher = asyncio.ensure_future(watch_disconnect())
        try:
            return list(await asyncio.gather(*(gather(job) for job in jobs)))
        finally:
            watcher.cancel()
            for job in jobs:
                self.release(job)

    def _record(self, job: Job, batch: list[TokenEvent]) -> None:
        """Timings and counters for events that arrived together (one clock read, one counter bump)."""
        now = time.perf_counter()
        n_tokens = 0
        for event in batch:
            if event.token_id is not None:
                if job.t_first is None:
                    job.t_first = now
                    self.metrics.ttft.observe(now - job.t_start)
                if event.queue_s is not None:  # the first token's event: queueing apart from prefill
                    self.metrics.queue_time.observe(event.queue_s)
                elif job.t_last is not None:
                    self.metrics.tpot.observe(now - job.t_last)
                job.t_last = now
                n_tokens += 1
            if event.finished:
                job.finish_reason = event.finish_reason or "error"
                job.error = event.error
                if job.t_last is None:
                    job.t_last = now
        if n_tokens:
            job.tokens_out += n_tokens
            self.metrics.generated_tokens.inc(n_tokens)
            self.metrics.child(self.metrics.model_generated_tokens, job.slot.name).inc(n_tokens)
