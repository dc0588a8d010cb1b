"""The engine process: an LLMEngine (scheduler, model runner, sampler, structured-output masks, output
detokenization) running its step loop in a process of its own, so the API process's HTTP, tokenization,
chat templates and SSE framing never hold its GIL (vLLM's "EngineCore" split).

The API side is orcd.engine.core_client.ProcessEngine; the wire is orcd.engine.ipc. The process ignores
SIGINT/SIGTERM (the API process drains first, then sends "stop") and exits when its socket closes, so it
never outlives the API process.
"""

from __future__ import annotations

import gc
import logging
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

    def build(self):
        """Load the model and build its LLMEngine here, progress on stderr."""
        import torch

        from orcd.engine.llm_engine import LLMEngine
        from orcd.loading.loader import load_model

        print(f"orcd serve: loading {self.path} on {self.device} ...", file=sys.stderr, flush=True)
        dtype = None if self.dtype == "auto" else getattr(torch, self.dtype)
        loaded = load_model(self.path, device=self.device, dtype=dtype)
        print(f"orcd serve: loaded {loaded.cfg.arch} in {loaded.load_seconds:.2f} s on {loaded.device}, "
              f"{loaded.weights_bytes / 2**20:.1f} MiB of weights", file=sys.stderr, flush=True)
        llm = LLMEngine(loaded, kv_fraction=self.kv_fraction, num_kv_blocks=self.num_kv_blocks,
                        max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                        enforce_eager=self.enforce_eager, batch_invariant=self.batch_invariant)
        graph = getattr(llm.runner, "graph", None)
        if graph is not None:
            print(f"orcd serve: captured {len(graph.buckets)} decode CUDA graphs in "
                  f"{graph.capture_seconds:.2f} s", file=sys.stderr, flush=True)
        return llm


def engine_main(conn, build: EngineBuild, idle_wait_s: float = 0.05) -> None:
    """The engine process's entry point (multiprocessing "spawn" target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[engine]: %(message)s")
    try:
        llm = build.build()
    except BaseException as err:  # the API process turns this into the load error clients see
        conn.send_bytes(ipc.dumps(("failed", str(err) or type(err).__name__, isinstance(err, OrcdError))))
        return
    freeze_heap()
    core = EngineCore(llm, conn, idle_wait_s)
    conn.send_bytes(ipc.dumps(("ready", {"device": str(llm.loaded.device),
                                         "kv_capacity_tokens": llm.kv_capacity_tokens,
                                         "stats": {**llm.stats(), "device_memory": core._memory()}})))
    core.run()


def freeze_heap() -> None:
    """Move everything alive now (the model, the vocabulary: hundreds of thousands of objects that are
    never garbage) out of the cyclic GC's reach, so a full collection while serving does not walk them
    (~0.1 s a pass with a 150k vocabulary: one long gap between two tokens of every stream)."""
    gc.collect()
    gc.freeze()


class EngineCore:
    """The step loop: read every pending command, step once, send that step's events with the stats."""

    def __init__(self, llm, conn, idle_wait_s: float):
        self.llm, self.conn, self.idle_wait_s = llm, conn, idle_wait_s
        self.stopped = False
        self.pending: list[TokenEvent] = []  # events made outside a step (a failed add, abort_all)
        self.cuda = str(llm.loaded.device).startswith("cuda")
        self.memory: tuple[float, dict | None] = (0.0, None)  # (when read, device memory) for stats

    def run(self) -> None:
        try:
            while not self.stopped:
                if not self._read(0.0 if self.llm.has_work() else self.idle_wait_s):
                    return  # the API process is gone: nobody to answer
                if self.stopped:
                    break
                if self.llm.has_work():
                    self._step()
                elif self.pending:
                    self._send([])
            self._send(self._end_all("cancelled"))
        except (EOFError, OSError):  # the socket closed under a send: the API process is gone
            return

    def _step(self) -> None:
        try:
            events = self.llm.step()
        except Exception as err:  # a bug outside the model: end everything, keep serving
            log.exception("engine step failed")
            events = self._end_all("error", f"{type(err).__name__}: {err}")
        self._send(events)

    def _send(self, events: list[TokenEvent]) -> None:
        # Stats go with the events: a client that reacts to an event sees a snapshot at least as new.
        events, self.pending = self.pending + events, []
        wire = [ipc.event_to_wire(e) for e in events]
        self.conn.send_bytes(ipc.dumps(("step", wire, {**self.llm.stats(), "device_memory": self._memory()})))

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

    def _read(self, timeout: float) -> bool:
        """Handle every command that arrives within `timeout` (then any more already there). False: EOF."""
        try:
            while self.conn.poll(timeout):
                self._handle(ipc.loads(self.conn.recv_bytes()))
                timeout = 0.0
        except (EOFError, OSError):
            return False
        return True

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "add":
            self._add(EngineRequest(msg[1], msg[2], msg[3]))
        elif kind == "abort":
            self.llm.abort(msg[1])
        elif kind == "abort_all":
            self.pending += self._end_all("cancelled")
        elif kind == "warm_grammars":  # built on a side thread; add_validated waits on its lock
            threading.Thread(target=self.llm.grammars, name="orcd-grammars", daemon=True).start()
        elif kind == "stop":
            self.stopped = True

    def _add(self, req: EngineRequest) -> None:
        try:
            self.llm.add_validated(req)  # the API process validated it
        except Exception as err:  # a late failure still ends the stream cleanly
            self.pending.append(TokenEvent(req.request_id, None, "", 0, finished=True, finish_reason="error",
                                           error=str(err), prompt_tokens=len(req.prompt_token_ids)))

    def _end_all(self, reason, error: str | None = None) -> list[TokenEvent]:
        try:
            return self.llm.abort_all(reason, error=error)
        except Exception:
            log.exception("could not end requests cleanly")
            return []
