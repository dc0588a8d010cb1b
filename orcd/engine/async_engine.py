"""AsyncEngine: the LLMEngine's step loop in one background thread, streams to asyncio callers.

The HTTP event loop never runs the model. Callers hand commands (add, cancel) to the engine thread
through a queue; the thread feeds each request's sink (a deque + one waiter future) with one
loop.call_soon_threadsafe per step and caller loop.
Only the engine thread touches the LLMEngine; stats() reads a snapshot the thread publishes.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from typing import Any

from orcd.engine.io import EngineRequest, TokenEvent
from orcd.engine.llm_engine import LLMEngine
from orcd.errors import OrcdError, RequestError

log = logging.getLogger(__name__)


class EngineStoppedError(OrcdError):
    """The engine is shutting down (or stopped) and accepts no new requests (maps to HTTP 503)."""


class _Sink:
    """Where one request's events go: a deque on the caller's loop, and the future of its one reader
    waiting for more (None when it is not waiting). Touched on that loop only."""

    __slots__ = ("loop", "events", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.events: deque[TokenEvent] = deque()
        self.waiter: asyncio.Future | None = None

    def put(self, event: TokenEvent) -> None:
        self.events.append(event)
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def wait(self) -> asyncio.Future:
        """A future that becomes True once an event is there (at once if one is)."""
        fut = self.loop.create_future()
        if self.events:
            fut.set_result(True)
        else:
            self.waiter = fut
        return fut


def _deliver(items: list[tuple[_Sink, TokenEvent]]) -> None:
    """Runs on the caller's loop: one step's events, in engine order."""
    for sink, event in items:
        sink.put(event)


class RequestStream:
    """Async iterator over one request's TokenEvents. Leaving it early cancels the request.

    `async for ev in engine.generate(req)` and `it = await engine.generate(req)` both work.
    """

    def __init__(self, engine: AsyncEngine, request_id: str, sink: _Sink):
        self._engine, self.request_id, self._sink = engine, request_id, sink
        self.finished = False

    def __aiter__(self) -> RequestStream:
        return self

    def __await__(self):
        yield from ()
        return self

    async def __anext__(self) -> TokenEvent:
        if self.finished:
            raise StopAsyncIteration
        try:
            while not self._sink.events:
                await self._sink.wait()
        except BaseException:  # CancelledError (client gone) and friends: free the request's blocks
            self._abandon()
            raise
        event = self._sink.events.popleft()
        if event.finished:
            self.finished = True
        return event

    def ready(self) -> list[TokenEvent]:
        """The events already delivered, without waiting (empty if none); stops after the final one."""
        out: list[TokenEvent] = []
        events = self._sink.events
        while not self.finished and events:
            event = events.popleft()
            out.append(event)
            if event.finished:
                self.finished = True
        return out

    def wait(self) -> asyncio.Future:
        """A future that becomes True once ready() has events (or the stream is over). Resolving it
        otherwise (a ping timer setting False) or cancelling it leaves the request running; the
        stream has one reader, so one pending wait."""
        if self.finished:
            fut = self._sink.loop.create_future()
            fut.set_result(True)
            return fut
        return self._sink.wait()

    async def aclose(self) -> None:
        self._abandon()

    def _abandon(self) -> None:
        if not self.finished:
            self.finished = True
            self._engine.cancel(self.request_id)

    def __del__(self) -> None:
        if not self.finished:
            self._engine.cancel(self.request_id)


class AsyncEngine:
    def __init__(self, llm_engine: LLMEngine, model_name: str | None = None, idle_wait_s: float = 0.05):
        self.engine = llm_engine
        loaded = llm_engine.loaded
        self.config = loaded.cfg
        self.architecture = loaded.cfg.arch
        self.device = loaded.device
        self.tokenizer = loaded.tokenizer
        gguf = getattr(loaded, "gguf", None)
        metadata = getattr(gguf, "metadata", None) or {}
        self.model_name = model_name or metadata.get("general.name") or self.architecture
        self._idle_wait_s = idle_wait_s
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._sinks: dict[str, _Sink] = {}  # request_id -> sink; guarded by _lock
        self._lock = threading.RLock()  # RLock: RequestStream.__del__ may run on any thread
        self._accepting = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: dict[str, Any] = llm_engine.stats()

    # ---- lifecycle ----
    def start(self) -> None:
        if self._thread is not None:
            return
        self._accepting = True
        self._thread = threading.Thread(target=self._loop, name="orcd-engine", daemon=True)
        self._thread.start()

    def shutdown(self, grace_s: float = 0.0) -> None:
        """Stop accepting; let running requests finish for up to grace_s; end the rest as cancelled."""
        self._accepting = False
        deadline = time.monotonic() + grace_s
        while grace_s > 0 and self.num_active() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._commands.put(("abort_all",))
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._accepting

    def num_active(self) -> int:
        with self._lock:
            return len(self._sinks)

    # ---- requests ----
    def generate(self, req: EngineRequest) -> RequestStream:
        """Validate now (raises RequestError / ContextLengthExceededError), then stream TokenEvents.

        Call from a coroutine on the event loop that will consume the stream.
        """
        if not self._accepting:
            raise EngineStoppedError("the engine is not accepting requests (shutting down or not started)")
        self.engine.validate(req)  # reads only immutable config: safe off the engine thread
        sink = _Sink(asyncio.get_running_loop())
        with self._lock:
            if req.request_id in self._sinks:
                raise RequestError(f"request id {req.request_id!r} is already running", param="request_id")
            self._sinks[req.request_id] = sink
        self._commands.put(("add", req))
        self._wake.set()
        return RequestStream(self, req.request_id, sink)

    def cancel(self, request_id: str) -> bool:
        """Cancel a request: its final event says 'cancelled'; its blocks are freed at the next step."""
        with self._lock:
            if request_id not in self._sinks:
                return False
        self._commands.put(("abort", request_id))
        self._wake.set()
        return True

    def stats(self) -> dict[str, Any]:
        """The snapshot published after the last step (never waits for the engine thread)."""
        return dict(self._stats)

    # ---- the engine thread ----
    def _loop(self) -> None:
        while True:
            self._drain_commands()
            if self._stop.is_set():
                break
            if not self.engine.has_work():
                self._publish([])
                self._wake.wait(self._idle_wait_s)
                self._wake.clear()
                continue
            try:
                events = self.engine.step()
            except Exception as err:  # a bug outside the model: end everything, keep the thread alive
                log.exception("engine step failed")
                events = self._end_all("error", f"{type(err).__name__}: {err}")
            self._publish(events)
        self._drain_commands()
        self._publish(self._end_all("cancelled"))

    def _end_all(self, reason, error: str | None = None) -> list[TokenEvent]:
        """Final events for every request; if the engine itself is broken, for every listener."""
        try:
            return self.engine.abort_all(reason, error=error)
        except Exception:
            log.exception("could not end requests cleanly")
            with self._lock:
                ids = list(self._sinks)
            return [TokenEvent(rid, None, "", 0, finished=True, finish_reason="error",
                               error=error or "engine failure") for rid in ids]

    def _drain_commands(self) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            if cmd[0] == "add":
                self._add(cmd[1])
            elif cmd[0] == "abort":
                self.engine.abort(cmd[1])
            elif cmd[0] == "abort_all":
                self._publish(self._end_all("cancelled"))

    def _add(self, req: EngineRequest) -> None:
        try:
            self.engine.add_validated(req)  # generate() validated it
        except Exception as err:  # a late failure still ends the stream cleanly
            event = TokenEvent(req.request_id, None, "", 0, finished=True, finish_reason="error",
                               error=str(err), prompt_tokens=len(req.prompt_token_ids))
            self._publish([event])

    def _publish(self, events: list[TokenEvent]) -> None:
        # Stats first: a client that reacts to an event must see a snapshot at least as new as it.
        self._stats = self.engine.stats()
        if not events:
            return
        # One loop callback per step (per caller loop), not one per event: order is kept per request.
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Sink, TokenEvent]]] = {}
        with self._lock:
            for event in events:
                sink = self._sinks.pop(event.request_id) if event.finished else self._sinks.get(
                    event.request_id)
                if sink is not None:
                    by_loop.setdefault(sink.loop, []).append((sink, event))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass
