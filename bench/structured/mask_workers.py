"""Can worker processes take the structured-output masks off the engine's thread? (issue 18; CPU only)

The 0.5B at 64 constrained streams spends ~2 ms of one core a step on llguidance masks, more than its
1.4 ms forward (docs/performance.md, session 31), and threads in one process queue for the GIL (session 18).
This walks `rows` matchers of one JSON schema over the qwen2 vocabulary (151,936 tokens) as a random-weight
model does (each step every row takes a random allowed token of its mask) and times each step's masks:

- procs 0: orcd's GrammarBackend.fill_rows on this thread, one row after another (what the engine does);
- procs P: orcd's mask workers (GrammarBackend(fill_procs=P), orcd/structured/workers.py, what
  `orcd serve --mask-workers P` runs): P spawned processes, each mirroring rows key % P; per step this
  thread sends each worker its rows' last tokens, the workers write the masks into one shared-memory
  bitmask, and this thread waits for every reply (the IPC is in the time; "busiest worker's own" is the
  largest sum of a worker's rows' fill times, IPC left out).

Every mode draws the same tokens from the same seeds, so equal token walks mean equal masks; the table
says whether they were. Not a test. `bench/structured/guided_phases.py --mask-workers N` measures the same
workers inside the engine's step.

    python bench/structured/mask_workers.py [--rows 64] [--steps 60] [--procs 0,1,2,4] [--schema plain]
        [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import numpy as np
from grammar_engines import load_vocab
from mask_cost import SCHEMAS

WARMUP = 5  # steps left out of the times (grammar compile, first masks)


def _grammar(schema: str) -> str:
    from orcd.structured.grammars import json_schema_grammar

    return json_schema_grammar(SCHEMAS[schema], "schema")


def _draw(bitmask: np.ndarray, rngs: list[random.Random]) -> list[int]:
    """A random allowed token per row (bit i of word j is token 32 j + i); EOS-only rows included."""
    out = []
    for row, rng in zip(bitmask, rngs, strict=True):
        words = np.flatnonzero(row)
        w = int(words[rng.randrange(len(words))])
        bits = [b for b in range(32) if (int(row[w]) >> b) & 1]
        out.append(32 * w + bits[rng.randrange(len(bits))])
    return out


def walk(rows: int, steps: int, schema: str, seed: int, procs: int):
    """(ms a step, the tokens drawn, the busiest worker's own ms a step): GrammarBackend.fill_rows over
    `rows` matchers, on this thread (procs 0) or on orcd's mask workers (fill_procs = procs); a worker's
    own time is the sum of its rows' fill times (Matcher.fill_s, measured there), IPC left out."""
    import torch

    from orcd.structured.backend import GrammarBackend

    backend = GrammarBackend(load_vocab("qwen2"), fill_procs=procs)
    grammar = _grammar(schema)
    matchers = [backend.matcher(grammar) for _ in range(rows)]
    rngs = [random.Random(seed + i) for i in range(rows)]
    times, walks, busiest, last = [], [], [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        if last is not None:
            for m, t in zip(matchers, last, strict=True):
                m.consume(t)
        bitmask = torch.zeros((rows, backend.words), dtype=torch.int32)
        backend.fill_rows(matchers, bitmask, list(range(rows)))
        times.append(time.perf_counter() - t0)
        own = [0.0] * max(procs, 1)
        for m in matchers:
            own[m.key % procs if procs else 0] += m.fill_s
        busiest.append(max(own))
        last = _draw(bitmask.numpy(), rngs)
        walks.append(last)
    assert backend.workers_failed is None, backend.workers_failed
    if backend.workers() is not None:
        backend.workers().close()
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
        times, walks, busiest = walk(a.rows, a.steps, a.schema, a.seed, p)
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
