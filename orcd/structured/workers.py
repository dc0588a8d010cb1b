"""Mask workers: processes that fill structured-output masks beside the engine's thread (opt-in).

llguidance computes one row's mask in ~10-35 µs of CPU (qwen2's 152k vocabulary); 64 constrained rows
take ~1-2 ms a step, longer than a small model's forward, and threads of one process queue for the GIL
(docs/performance.md, sessions 18 and 31). With GrammarBackend(fill_procs=P), P spawned processes each
mirror the matchers assigned to them (matcher.key % P): they receive each matcher's grammar once, then its
tokens as the engine samples them, and write its mask into one shared-memory bitmask. The engine's own
matchers stay as they were (validation, the single-row paths, a fallback when a worker fails).

Protocol (one duplex pipe per worker, pickled lists): the engine sends [(key, grammar or None, tokens,
slot), ...] plus the keys of matchers that were garbage-collected; the worker applies each row's tokens,
writes the row's mask into bitmask row `slot` and answers [(key, fill seconds), ...].
Invariant: a worker's copy of a matcher has consumed exactly the tokens the engine's matcher has, in the
same order (Matcher.unsent holds those not sent yet), so both give the same mask.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import multiprocessing as mp
import weakref
from collections import deque
from multiprocessing import shared_memory

import numpy as np
import torch

CAPACITY = 256  # rows of the shared bitmask; a step's rows beyond it are filled on the engine's thread
START_S = 120.0  # seconds a worker may take to start (import torch, build llguidance's tokenizer)


def _serve(conn, make_backend, tokenizer, shm_name: str, shape: tuple[int, int]) -> None:
    """A worker's loop (in its own process): matchers by key, masks into the shared bitmask.
    make_backend: GrammarBackend itself (pickled by name: this module does not import backend.py)."""
    shm = shared_memory.SharedMemory(name=shm_name)
    words = np.ndarray(shape, dtype=np.int32, buffer=shm.buf)
    bitmask = torch.from_numpy(words)  # the same memory
    backend = make_backend(tokenizer)
    backend.lltok  # noqa: B018  (built before "ready": the first step should not wait for it)
    conn.send("ready")
    try:
        _loop(conn, backend, bitmask)
    except (EOFError, OSError):  # the engine's process is gone: nothing left to serve
        pass
    del bitmask, words
    shm.close()


def _loop(conn, backend, bitmask: torch.Tensor) -> None:
    """Until the engine sends None: drop the collected matchers, apply each row's tokens, write its mask
    into bitmask row `slot` (the shared memory), answer the fill times."""
    words = bitmask.numpy()  # the same memory: numpy zeroes a row faster than a torch op
    matchers = {}  # key -> Matcher, this worker's copies
    while (msg := conn.recv()) is not None:
        rows, dead = msg
        for key in dead:
            matchers.pop(key, None)
        out = []
        for key, grammar, tokens, slot in rows:
            if grammar is not None:
                matchers[key] = backend.matcher(grammar)
            m = matchers[key]
            for t in tokens:
                m.consume(t)
            words[slot] = 0
            backend.fill_row(m, bitmask, slot)
            out.append((key, m.fill_s))
        conn.send(out)


class MaskWorkers:
    """`procs` worker processes for one tokenizer, started on construction (each builds its own llguidance
    tokenizer: ~1-3 s). fill() is called from one thread at a time (the engine's)."""

    def __init__(self, make_backend, tokenizer, procs: int, words: int):
        """make_backend(tokenizer): each worker's GrammarBackend (the class; fill_procs left at 0)."""
        self.shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(create=True,
                                                                                 size=CAPACITY * words * 4)
        self.shared = torch.from_numpy(np.ndarray((CAPACITY, words), dtype=np.int32, buffer=self.shm.buf))
        self.dead: deque[tuple[int, int]] = deque()  # (worker, key) of collected matchers (appended by GC)
        self.known: set[int] = set()  # keys whose grammar a worker has
        self._keys = itertools.count()  # next() is atomic in CPython: matchers may be made on several threads
        plain = copy.copy(tokenizer)
        plain._template = None  # the chat template (a Jinja environment) does not pickle; masks never use it
        ctx = mp.get_context("spawn")  # not fork: the engine's process has threads and may hold CUDA
        self.pipes, self.procs = [], []
        for _ in range(procs):
            here, there = ctx.Pipe()
            args = (there, make_backend, plain, self.shm.name, (CAPACITY, words))
            p = ctx.Process(target=_serve, args=args, daemon=True, name="orcd-mask-worker")
            p.start()
            there.close()  # the worker holds it now: a worker that dies is an EOFError here
            self.pipes.append(here)
            self.procs.append(p)
        atexit.register(self.close)
        for c in self.pipes:
            try:
                ready = c.poll(START_S) and c.recv() == "ready"
            except EOFError:  # it died while starting
                ready = False
            if not ready:
                self.close()
                raise RuntimeError(f"a mask worker did not start within {START_S:.0f} s")

    def adopt(self, matcher) -> None:
        """Give a new matcher its key and worker; its copy there is dropped when it is collected."""
        key = next(self._keys)
        matcher.key, matcher.unsent = key, []
        weakref.finalize(matcher, self.dead.append, (key % len(self.pipes), key))

    def fill(self, matchers: list, slots: list[int]) -> list[int]:
        """Fill the masks of matchers[j] into shared rows slots[j] (< CAPACITY) on the workers, each
        after its unsent tokens; waits for every worker. Returns the matchers' fill times in order."""
        n = len(self.pipes)
        work: list[list] = [[] for _ in range(n)]
        for m, slot in zip(matchers, slots, strict=True):
            grammar = None if m.key in self.known else m.grammar
            work[m.key % n].append((m.key, grammar, m.unsent, slot))
            self.known.add(m.key)
            m.unsent = []
        dead = [self.dead.popleft() for _ in range(len(self.dead))]  # deque: safe beside GC's appends
        asked = []
        for w, (c, rows) in enumerate(zip(self.pipes, work, strict=True)):
            gone = [k for ww, k in dead if ww == w]
            if rows or gone:
                c.send((rows, gone))
                asked.append(c)
        self.known.difference_update(k for _, k in dead)
        took: dict[int, float] = {}
        for c in asked:  # every message gets one answer
            took.update(c.recv())
        return [took[m.key] for m in matchers]

    def close(self) -> None:
        """Stop the workers and free the shared bitmask (at exit too; a second call does nothing)."""
        if self.shm is None:
            return
        for c in self.pipes:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        del self.shared
        self.shm.close()
        self.shm.unlink()
        self.shm = None
