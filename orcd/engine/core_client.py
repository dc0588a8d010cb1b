"""ProcessEngine: AsyncEngine's interface over an engine process (orcd.engine.core_process).

The API process keeps the GGUF's config and tokenizer (read from the file's header, no weights) and
validates requests itself; the engine process holds the model. The event loop that start() runs on
reads the engine's socket itself (loop.add_reader): each engine step's events (one message per step)
go to their streams with no thread hop and no wait for the GIL; commands go down from whichever thread
sends them.
If the engine process dies, every open stream ends with an error event and new requests get
EngineStoppedError (HTTP 503): nothing hangs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
import time
from collections import deque
from typing import Any

from orcd.engine import ipc
from orcd.engine.async_engine import EngineStoppedError, RequestStream, _deliver, _Sink
from orcd.engine.core_process import EngineBuild, engine_main
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.errors import OrcdError, RequestError

log = logging.getLogger(__name__)


class EngineFront:
    """The LLMEngine facts the API process needs without the model: validation (LLMEngine.validate, the
    one place requests are checked, over the file's config, the engine's KV capacity and a grammar
    backend of its own) and the tokenizer."""

    validate = LLMEngine.validate  # reads self.cfg, self.kv_capacity_tokens, self.grammars()

    def __init__(self, cfg, tokenizer, kv_capacity_tokens: int, warm_grammars):
        self.cfg, self.tokenizer, self.kv_capacity_tokens = cfg, tokenizer, kv_capacity_tokens
        self._warm_grammars = warm_grammars
        self._grammars = None
        self._lock = threading.Lock()

    def grammars(self):
        with self._lock:
            if self._grammars is None:
                from orcd.structured.backend import GrammarBackend

                self._warm_grammars()  # the engine process builds its own (its masks) alongside
                self._grammars = GrammarBackend(self.tokenizer)
            return self._grammars


class ProcessEngine:
    """One client of an engine process: ProcessEngine.spawn(build) starts a process of its own (its one
    client); ProcessEngine(path, conn) attaches to one shared with other API processes (orcd serve
    --api-processes), which the parent owns. Either way it waits (blocking) until the model is loaded;
    start() starts the reader."""

    def __init__(self, path, conn, process=None, model_name: str | None = None,
                 load_timeout_s: float = 3600.0):
        from orcd.gguf import open_gguf
        from orcd.gguf.config import model_config_from_gguf
        from orcd.tokenizer import load_tokenizer

        self._conn, self.process = conn, process  # process: None when this API process does not own it
        try:
            gguf = open_gguf(path)  # while the engine process loads the weights
            self.config = model_config_from_gguf(gguf)
            self.tokenizer = load_tokenizer(gguf.metadata)
        except BaseException:
            self._kill()
            raise
        self.architecture = self.config.arch
        self.model_name = model_name or gguf.metadata.get("general.name") or self.architecture
        info = self._await_ready(load_timeout_s)
        self.device = info["device"]
        self.engine = EngineFront(self.config, self.tokenizer, info["kv_capacity_tokens"],
                                  lambda: self._post(("warm_grammars",)))
        self._stats: dict[str, Any] = info["stats"]
        self._sinks: dict[str, _Sink] = {}  # request_id -> sink; guarded by _lock
        self._lock = threading.RLock()  # RLock: RequestStream.__del__ may run on any thread
        self._outbox: deque[tuple] = deque()
        self._send_lock = threading.Lock()
        self._accepting = False
        self._stopping = False
        self.failure: str | None = None  # why the engine is gone, once its socket closed unasked
        self._asked: dict[int, asyncio.Future] = {}  # cancel_shared's questions to the engine, by token
        self._tokens = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop reading the socket, once started
        self._closed = threading.Event()  # set once the socket is read to its end (the process is gone)

    @classmethod
    def spawn(cls, build: EngineBuild, model_name: str | None = None,
              load_timeout_s: float = 3600.0) -> ProcessEngine:
        """An engine process of this API process's own (it is its one client)."""
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA or threads
        conn, child = ctx.Pipe(duplex=True)
        process = ctx.Process(target=engine_main, args=([child], build), name="orcd-engine", daemon=True)
        process.start()
        child.close()  # the engine process holds the only other end: EOF here when it dies
        return cls(build.path, conn, process, model_name, load_timeout_s)

    def _await_ready(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        try:
            while not self._conn.poll(1.0):
                if time.monotonic() > deadline:
                    raise OrcdError(f"the engine process did not load its model in {timeout_s:.0f} s")
            msg = ipc.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            msg = ("failed", f"the engine process exited while loading{self._exit_code()}", False)
        except BaseException:
            self._kill()
            raise
        if msg[0] == "ready":
            return msg[1]
        self._kill()
        raise (OrcdError if msg[2] else RuntimeError)(msg[1])

    # ---- lifecycle ----
    def start(self) -> None:
        """Call on the event loop that serves the streams: from now on it reads the engine's socket."""
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._accepting = True
        self._loop.add_reader(self._conn.fileno(), self._on_readable)

    def shutdown(self, grace_s: float = 0.0) -> None:
        """Stop accepting; let running requests finish for up to grace_s; end the rest as cancelled.
        Blocking: call it off the loop that reads the socket (asyncio.to_thread), which must keep running."""
        self._accepting, self._stopping = False, True
        deadline = time.monotonic() + grace_s
        while grace_s > 0 and self.num_active() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._post(("stop",))  # the engine aborts this client's requests and closes its socket: EOF
        if self.process is not None:  # its own process: it exits with its one client gone
            self.process.join(timeout=30)
            self._kill()
        if self._loop is not None and not self._loop.is_closed():
            self._closed.wait(timeout=10)  # the loop reads the last events, then the EOF
        self._conn.close()

    @property
    def running(self) -> bool:
        return self._loop is not None and not self._closed.is_set() and self._accepting

    def num_active(self) -> int:
        with self._lock:
            return len(self._sinks)

    def _exit_code(self, wait_s: float = 5.0) -> str:
        """" (exit code N)" when this API process owns the engine process, else ""."""
        if self.process is None:
            return ""
        self.process.join(timeout=wait_s)
        return f" (exit code {self.process.exitcode})"

    def _kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)

    # ---- requests ----
    def generate(self, req: EngineRequest) -> RequestStream:
        """Validate now (raises RequestError / ContextLengthExceededError), then stream TokenEvents."""
        if not self._accepting:
            raise EngineStoppedError("the engine is not accepting requests (shutting down, stopped or "
                                     "its process exited)")
        self.engine.validate(req)
        sink = _Sink(asyncio.get_running_loop())
        with self._lock:
            if not self._accepting:  # the reader ended every stream meanwhile
                raise EngineStoppedError("the engine process exited")
            if req.request_id in self._sinks:
                raise RequestError(f"request id {req.request_id!r} is already running", param="request_id")
            self._sinks[req.request_id] = sink
        self._post(("add", req.request_id, req.prompt_token_ids, req.sampling))
        return RequestStream(self, req.request_id, sink)

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            if request_id not in self._sinks:
                return False
        self._post(("abort", request_id))
        return True

    async def cancel_shared(self, request_id: str, timeout_s: float = 5.0) -> bool:
        """Cancel a request (and its other choices, `ID.N`) that another API process over the same engine
        runs (orcd serve --api-processes): the engine looks it up among every client's. False when no
        client runs it, and always with an engine of this process's own."""
        if self.process is not None or not self.running:
            return False
        token = next(self._tokens)
        self._asked[token] = asyncio.get_running_loop().create_future()
        self._post(("cancel_any", token, request_id))
        try:
            return await asyncio.wait_for(self._asked[token], timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            self._asked.pop(token, None)

    def stats(self) -> dict[str, Any]:
        """The snapshot the engine process sent with its last step."""
        return dict(self._stats)

    def _post(self, msg: tuple) -> None:
        """Send msg now, or leave it to the thread sending already (a __del__ inside a send, say)."""
        self._outbox.append(msg)
        while self._outbox and self._send_lock.acquire(blocking=False):
            try:
                while self._outbox:
                    self._conn.send_bytes(ipc.dumps(self._outbox.popleft()))
            except (OSError, ValueError):  # the process is gone: the reader ends every stream
                self._outbox.clear()
            finally:
                self._send_lock.release()

    # ---- the socket's reader, on the loop ----
    def _on_readable(self) -> None:
        """One message (the loop calls again while more are there: no poll, ~30 µs each, per step); EOF:
        the process is gone. The engine writes each message whole, so a read never waits long."""
        try:
            msg = ipc.loads(self._conn.recv_bytes())
            if msg[0] == "step":
                self._stats = msg[2]  # first: see AsyncEngine._publish
                if msg[1]:
                    self._publish(msg[1])
            elif msg[0] == "cancelled":  # the answer to a cancel_shared
                asked = self._asked.get(msg[1])
                if asked is not None and not asked.done():
                    asked.set_result(msg[2])
        except (EOFError, OSError):
            self._on_exit()
        except Exception:
            log.exception("reading the engine process's events failed")
            self._on_exit()

    def _on_exit(self) -> None:
        """The engine process is gone: every stream still open ends now (an error unless shutting down)."""
        if self._closed.is_set():
            return
        self._loop.remove_reader(self._conn.fileno())
        with self._lock:
            self._accepting = False
            ids = list(self._sinks)
        if not self._stopping:
            self.failure = f"the engine process exited{self._exit_code(0.5)}; restart orcd serve"
            log.error("%s; %d stream(s) ended", self.failure, len(ids))
        reason = "cancelled" if self._stopping else "error"
        error = None if self._stopping else "the engine process exited"
        self._publish([ipc.final_wire(rid, reason, error) for rid in ids])
        self._closed.set()

    def _publish(self, wire: list[tuple]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        with self._lock:
            for t in wire:
                rid, finished = t[0], t[ipc.FINISHED]
                sink = self._sinks.pop(rid, None) if finished else self._sinks.get(rid)
                if sink is not None:
                    by_loop.setdefault(sink.loop, []).append((sink, ipc.event_from_wire(t)))
        for loop, items in by_loop.items():
            if loop is self._loop:
                _deliver(items)  # this is the loop: no hop
                continue
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass
