"""The engine process: an LLMEngine (scheduler, model runner, sampler, structured-output masks, output
detokenization) running its step loop in a process of its own, so the API process's HTTP, tokenization,
chat templates and SSE framing never hold its GIL (vLLM's "EngineCore" split).

The API side is orcd.engine.core_client.ProcessEngine; the wire is orcd.engine.ipc. One engine serves
one or several API processes (`orcd serve --api-processes N`), each over a socket of its own. The
process ignores SIGINT/SIGTERM (the API processes drain first, then send "stop") and exits once every
client's socket has closed, so it never outlives the API processes.
"""

from __future__ import annotations

import gc
import logging
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from orcd.engine import ipc
from orcd.engine.io import EngineRequest, TokenEvent
from orcd.errors import OrcdError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineBuild:
    """Everything needed to load a model and build its LLMEngine (picklable: it crosses to the process)."""

    path: Path
    device: str = "auto"
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    kv_fraction: float = 0.7
    num_kv_blocks: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    enforce_eager: bool = False
    batch_invariant: str = "seeded"
    warm_prefill_graphs: bool = True  # capture every prefill CUDA graph bucket at start (LLMEngine)
    dense_batch_rows: int | str | None = "auto"  # LLMEngine's: batches of >= this many rows on dense copies
    min_prefix_hit: int | None = None  # LLMEngine's: cached prefixes shorter than this are recomputed
    q6k_layout: str = "auto"  # load_model's: auto | gguf | split (orcd/loading/q6k_layout.py)
    overlap: bool = True  # LLMEngine's: launch a decode step before reading the one before (overlap.py)

    def build(self):
        """Load the model and build its LLMEngine here, progress on stderr."""
        import torch

        from orcd.engine.llm_engine import LLMEngine
        from orcd.loading.loader import load_model

        print(f"orcd serve: loading {self.path} on {self.device} ...", file=sys.stderr, flush=True)
        dtype = None if self.dtype == "auto" else getattr(torch, self.dtype)
        loaded = load_model(self.path, device=self.device, dtype=dtype, q6k_layout=self.q6k_layout)
        print(f"orcd serve: loaded {loaded.cfg.arch} in {loaded.load_seconds:.2f} s on {loaded.device}, "
              f"{loaded.weights_bytes / 2**20:.1f} MiB of weights", file=sys.stderr, flush=True)
        llm = LLMEngine(loaded, kv_fraction=self.kv_fraction, num_kv_blocks=self.num_kv_blocks,
                        max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                        enforce_eager=self.enforce_eager, batch_invariant=self.batch_invariant,
                        warm_prefill_graphs=self.warm_prefill_graphs, dense_batch_rows=self.dense_batch_rows,
                        min_prefix_hit=self.min_prefix_hit, overlap=self.overlap)
        if llm.dense_weights_bytes:
            print(f"orcd serve: + {llm.dense_weights_bytes / 2**20:.1f} MiB of dense weight copies (decode "
                  f"batches of >= {llm.dense.rows} sequences)", file=sys.stderr, flush=True)
        graph, warm = getattr(llm.runner, "graph", None), llm.prefill_graph_warmup
        if graph is not None:
            print(f"orcd serve: captured {len(graph.buckets)} decode CUDA graphs in "
                  f"{graph.capture_seconds:.2f} s", file=sys.stderr, flush=True)
        if warm is not None:
            failed = " (a capture failed: prefill runs eagerly)" if warm["failed"] else ""
            print(f"orcd serve: captured {len(warm['buckets'])} prefill CUDA graphs in "
                  f"{warm['seconds']:.2f} s{failed}", file=sys.stderr, flush=True)
        return llm


def engine_main(conns: list, build: EngineBuild, idle_wait_s: float = 0.05) -> None:
    """The engine process's entry point (multiprocessing "spawn" target). `conns`: one socket per client
    (API process); each gets the "ready" (or "failed") message, then the events of its own requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[engine]: %(message)s")
    try:
        llm = build.build()
    except BaseException as err:  # the API processes turn this into the load error clients see
        _tell_all(conns, ("failed", str(err) or type(err).__name__, isinstance(err, OrcdError)))
        return
    freeze_heap()
    core = EngineCore(llm, conns, idle_wait_s)
    info = {"device": str(llm.loaded.device), "kv_capacity_tokens": llm.kv_capacity_tokens,
            "stats": {**llm.stats(), "device_memory": core._memory()}}
    _tell_all(conns, ("ready", info))
    core.run()


def _tell_all(conns: list, msg: tuple) -> None:
    data = ipc.dumps(msg)
    for conn in conns:
        try:
            conn.send_bytes(data)
        except OSError:  # that client is gone already: the step loop drops it at its EOF
            pass


def freeze_heap() -> None:
    """Move everything alive now (the model, the vocabulary: hundreds of thousands of objects that are
    never garbage) out of the cyclic GC's reach, so a full collection while serving does not walk them
    (~0.1 s a pass with a 150k vocabulary: one long gap between two tokens of every stream)."""
    gc.collect()
    gc.freeze()


class EngineCore:
    """The step loop over several clients (API processes): read every pending command, step once, send
    each client the events of its own requests with the stats. A client's request ids are its own: the
    engine runs them as "CLIENT:ID" and routes events back by that. A client that leaves (EOF, or "stop")
    has its requests aborted (blocks freed at the next step); the loop ends when no client is left."""

    def __init__(self, llm, conns: list, idle_wait_s: float, stats_every_s: float = 0.1):
        self.llm, self.idle_wait_s, self.stats_every_s = llm, idle_wait_s, stats_every_s
        self.clients: dict = {conn: k for k, conn in enumerate(conns)}  # Connection -> client index
        self.by_fd = {conn.fileno(): conn for conn in conns}
        self.poller = select.poll()  # one, kept: ~2 µs a step, where multiprocessing's wait() builds
        for fd in self.by_fd:  # a selector per call (~10-20 µs on the dev box)
            self.poller.register(fd, select.POLLIN)
        self.owner: dict[str, tuple[int, str]] = {}  # engine request id -> (client index, client's id)
        self.pending: list[TokenEvent] = []  # events made outside a step (a failed add)
        self.stats_sent = 0.0  # monotonic time every client last got the stats
        self.cuda = str(llm.loaded.device).startswith("cuda")
        self.memory: tuple[float, dict | None] = (0.0, None)  # (when read, device memory) for stats

    def run(self) -> None:
        while self.clients:
            self._read(0.0 if self.llm.has_work() else self.idle_wait_s)
            if self.llm.has_work():
                self._step()
            elif self.pending:
                self._send([])

    def _step(self) -> None:
        try:
            events = self.llm.step()
        except Exception as err:  # a bug outside the model: end everything, keep serving
            log.exception("engine step failed")
            events = self._end_all("error", f"{type(err).__name__}: {err}")
        self._send(events)

    def _send(self, events: list[TokenEvent]) -> None:
        """Each client's events go to it; a client with none gets the stats alone, at most every
        stats_every_s while the engine is busy and once when it goes idle (its /health stays current)."""
        events, self.pending = self.pending + events, []
        out: dict[int, list[tuple]] = {}
        for e in events:
            owner = self.owner.pop(e.request_id, None) if e.finished else self.owner.get(e.request_id)
            if owner is not None:  # None: its client left
                out.setdefault(owner[0], []).append((owner[1],) + ipc.event_to_wire(e)[1:])
        now = time.monotonic()
        every = not self.llm.has_work() or now - self.stats_sent >= self.stats_every_s
        if every:
            self.stats_sent = now
        # Stats go with the events: a client that reacts to an event sees a snapshot at least as new.
        stats = {**self.llm.stats(), "device_memory": self._memory()}
        for conn, k in list(self.clients.items()):
            if k in out or every:
                try:
                    conn.send_bytes(ipc.dumps(("step", out.get(k, []), stats)))
                except OSError:  # its API process is gone
                    self._leave(conn)

    def _memory(self) -> dict | None:
        """The device's own memory figures (cudaMemGetInfo), read at most twice a second: /health shows
        them, and the API process must not open a CUDA context of its own to read them."""
        now = time.monotonic()
        if not self.cuda or now - self.memory[0] < 0.5:
            return self.memory[1]
        import torch

        free, total = torch.cuda.mem_get_info(self.llm.loaded.device)
        self.memory = (now, {"free_bytes": int(free), "total_bytes": int(total),
                             "used_bytes": int(total - free)})
        return self.memory[1]

    def _read(self, timeout: float) -> None:
        """Handle every command that arrives within `timeout` (then any more already there)."""
        while self.clients:
            ready = [self.by_fd[fd] for fd, _ in self.poller.poll(timeout * 1000) if fd in self.by_fd]
            if not ready:
                return
            for conn in ready:
                if conn not in self.clients:  # it left during this round
                    continue
                try:
                    msg = ipc.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    self._leave(conn)
                    continue
                self._handle(conn, msg)
            timeout = 0.0

    def _handle(self, conn, msg: tuple) -> None:
        kind, k = msg[0], self.clients.get(conn)
        if k is None:  # it left while its messages were being read
            return
        if kind == "add":
            self._add(k, EngineRequest(f"{k}:{msg[1]}", msg[2], msg[3]), msg[1])
        elif kind == "abort":
            self.llm.abort(f"{k}:{msg[1]}")
        elif kind == "warm_grammars":  # built on a side thread; add_validated waits on its lock
            threading.Thread(target=self.llm.grammars, name="orcd-grammars", daemon=True).start()
        elif kind == "cancel_any":  # another client's request, by its id (and its choices, ID.N)
            rid, prefix = msg[2], msg[2] + "."
            hits = [e for e, (_, own) in self.owner.items() if own == rid or own.startswith(prefix)]
            for engine_id in hits:
                self.llm.abort(engine_id)
            conn.send_bytes(ipc.dumps(("cancelled", msg[1], bool(hits))))
        elif kind == "stop":
            self._leave(conn)

    def _add(self, k: int, req: EngineRequest, own_id: str) -> None:
        self.owner.setdefault(req.request_id, (k, own_id))
        try:
            self.llm.add_validated(req)  # the API process validated it
        except Exception as err:  # a late failure still ends the stream cleanly
            self.pending.append(TokenEvent(req.request_id, None, "", 0, finished=True, finish_reason="error",
                                           error=str(err), prompt_tokens=len(req.prompt_token_ids)))

    def _leave(self, conn) -> None:
        """A client is gone (EOF) or said "stop": its requests end at the next step, unsent."""
        k = self.clients.pop(conn, None)
        if k is None:
            return
        fd = conn.fileno()
        self.poller.unregister(fd)
        del self.by_fd[fd]
        conn.close()
        for rid, (owner, _) in self.owner.items():
            if owner == k:
                self.llm.abort(rid)

    def _end_all(self, reason, error: str | None = None) -> list[TokenEvent]:
        try:
            return self.llm.abort_all(reason, error=error)
        except Exception:
            log.exception("could not end requests cleanly")
            return []
