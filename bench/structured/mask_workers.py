"""Can worker processes take the structured-output masks off the engine's thread? (issue 18; CPU only)

The 0.5B at 64 constrained streams spends ~2 ms of one core a step on llguidance masks, more than its
1.4 ms forward (docs/performance.md, session 31), and threads in one process queue for the GIL (session 18).
This walks `rows` matchers of one JSON schema over the qwen2 vocabulary (151,936 tokens) as a random-weight
model does (each step every row takes a random allowed token of its mask) and times each step's masks:

- procs 0: orcd's GrammarBackend.fill_rows on this thread, one row after another (what the engine does);
- procs P: P spawned processes, each owning rows i % P (its own tokenizer and matchers); per step this
  thread sends each worker its rows' last tokens and bitmask slots, the workers apply them and write the
  masks into one shared-memory bitmask, and this thread waits for every reply (the IPC is in the time;
  "busiest worker's own" is the longest time a worker spent on its rows, IPC left out).

Every mode draws the same tokens from the same seeds, so equal token walks mean equal masks; the table
says whether they were. Not a test. The engine's opt-in `--mask-workers N` (orcd/structured/workers.py) is
this idea inside the step; `bench/structured/guided_phases.py --mask-workers N` measures that one.

    python bench/structured/mask_workers.py [--rows 64] [--steps 60] [--procs 0,1,2,4] [--schema plain]
        [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from multiprocessing import shared_memory

import numpy as np
from grammar_engines import load_vocab
from mask_cost import SCHEMAS

WARMUP = 5  # steps left out of the times (grammar compile, first masks)


def _grammar(schema: str) -> str:
    from orcd.structured.grammars import json_schema_grammar

    return json_schema_grammar(SCHEMAS[schema], "schema")


def _worker(conn, shm_name: str, shape: tuple[int, int], schema: str, keys: list[int]) -> None:
    """One worker: its own tokenizer, backend and matchers for `keys`; then per message [(key, token or
    None)] apply each token and write the key's mask into row `key` of the shared bitmask."""
    import torch

    from orcd.structured.backend import GrammarBackend

    shm = shared_memory.SharedMemory(name=shm_name)
    words = np.ndarray(shape, dtype=np.int32, buffer=shm.buf)
    bitmask = torch.from_numpy(words)  # the same memory
    backend = GrammarBackend(load_vocab("qwen2"))
    grammar = _grammar(schema)
    matchers = {k: backend.matcher(grammar) for k in keys}
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        t0 = time.perf_counter()
        for key, token in msg:
            m = matchers[key]
            if token is not None:
                m.consume(token)
            words[key] = 0
            backend.fill_row(m, bitmask, key)
        conn.send(time.perf_counter() - t0)  # seconds this worker spent on the message's rows
    del bitmask, words
    shm.close()


def _draw(bitmask: np.ndarray, rngs: list[random.Random]) -> list[int]:
    """A random allowed token per row (bit i of word j is token 32 j + i); EOS-only rows included."""
    out = []
    for row, rng in zip(bitmask, rngs, strict=True):
        words = np.flatnonzero(row)
        w = int(words[rng.randrange(len(words))])
        bits = [b for b in range(32) if (int(row[w]) >> b) & 1]
        out.append(32 * w + bits[rng.randrange(len(bits))])
    return out


def walk_serial(rows: int, steps: int, schema: str, seed: int) -> tuple[list[float], list[list[int]]]:
    import torch

    from orcd.structured.backend import GrammarBackend

    backend = GrammarBackend(load_vocab("qwen2"))
    grammar = _grammar(schema)
    matchers = [backend.matcher(grammar) for _ in range(rows)]
    rngs = [random.Random(seed + i) for i in range(rows)]
    times, walks, last = [], [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        if last is not None:
            for m, t in zip(matchers, last, strict=True):
                m.consume(t)
        bitmask = torch.zeros((rows, backend.words), dtype=torch.int32)
        backend.fill_rows(matchers, bitmask, list(range(rows)))
        times.append(time.perf_counter() - t0)
        last = _draw(bitmask.numpy(), rngs)
        walks.append(last)
    return times, walks


def walk_workers(rows: int, steps: int, schema: str, seed: int, procs: int):
    words = (load_vocab("qwen2").vocab_size + 31) // 32
    shm = shared_memory.SharedMemory(create=True, size=rows * words * 4)
    bitmask = np.ndarray((rows, words), dtype=np.int32, buffer=shm.buf)
    ctx = mp.get_context("spawn")
    owned = [[k for k in range(rows) if k % procs == p] for p in range(procs)]
    pipes, workers = [], []
    for keys in owned:
        here, there = ctx.Pipe()
        w = ctx.Process(target=_worker, args=(there, shm.name, (rows, words), schema, keys), daemon=True)
        w.start()
        pipes.append(here)
        workers.append(w)
    for c in pipes:
        assert c.recv() == "ready"
    rngs = [random.Random(seed + i) for i in range(rows)]
    times, walks, last, busiest = [], [], None, []
    for _ in range(steps):
        t0 = time.perf_counter()
        for c, keys in zip(pipes, owned, strict=True):
            c.send([(k, None if last is None else last[k]) for k in keys])
        busiest.append(max(c.recv() for c in pipes))
        times.append(time.perf_counter() - t0)
        last = _draw(bitmask, rngs)
        walks.append(last)
    for c in pipes:
        c.send(None)
    for w in workers:
        w.join(timeout=10)
    del bitmask
    shm.close()
    shm.unlink()
    return times, walks, busiest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--procs", default="0,1,2,4", help="comma list; 0: this thread, one row after another")
    ap.add_argument("--schema", default="plain", choices=sorted(SCHEMAS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    res, ref = [], None
    for p in [int(x) for x in a.procs.split(",")]:
        if p == 0:
            times, walks = walk_serial(a.rows, a.steps, a.schema, a.seed)
            busiest = times
        else:
            times, walks, busiest = walk_workers(a.rows, a.steps, a.schema, a.seed, p)
        ref = walks if ref is None else ref
        ms = [t * 1e3 for t in times[WARMUP:]]
        res.append({"procs": p, "median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
                    "max_ms": max(ms), "busiest_median_ms": statistics.median(busiest[WARMUP:]) * 1e3,
                    "same_tokens": walks == ref})
    meta = {"rows": a.rows, "steps": a.steps, "schema": a.schema, "cpus": os.cpu_count(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({**meta, "modes": res}, f, indent=1)
    print(f"{a.rows} rows, {a.schema} schema, {os.cpu_count()} CPUs; ms a step for every row's mask "
          f"(after {WARMUP} warm-up steps)")
    print("procs  median  mean    max     busiest worker's own median  same tokens as the first mode")
    for r in res:
        print(f"{r['procs']:5d}  {r['median_ms']:6.2f}  {r['mean_ms']:6.2f}  {r['max_ms']:6.2f}  "
              f"{r['busiest_median_ms']:27.2f}  {r['same_tokens']}")
    return 0 if all(r["same_tokens"] for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
