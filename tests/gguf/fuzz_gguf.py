"""Fuzz orcd's GGUF load path with mutated/truncated valid files (issue 8 item 1).

    python tests/gguf/fuzz_gguf.py --cases 10000 [--seed 0] [--json OUT]

Each case mutates a small valid file (header counts, string/array lengths, types, dims, tensor offsets,
truncation, byte flips, inserts, deletes: see tests/gguf/gguf_fuzz.py) and runs the full CPU load
(reader, config, validation, tokenizer, model). Pass: every case loads or raises a one-line OrcdError,
within 1 s, with bounded memory. Exits 1 on any other exception, hang (5 s alarm) or slow case.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from gguf_fuzz import load, mutate, write_seeds  # noqa: E402
from gguf_layout import header_fields  # noqa: E402


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def run(cases: int, seed: int) -> dict:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="orcd-fuzz-"))
    seeds = {n: (d, header_fields(d)) for n, d in write_seeds(tmp).items()}
    load(tmp / "seed-qwen2.gguf")  # warm imports before measuring
    signal.signal(signal.SIGALRM, _alarm)
    outcomes, failures, times, peaks, slow = Counter(), [], [], [], []
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    path = tmp / "case.gguf"
    t_start = time.perf_counter()
    for i in range(cases):
        name = rng.choice(sorted(seeds))
        data, fields = seeds[name]
        bad, ops = mutate(data, fields, rng.randint)
        path.write_bytes(bad)
        tracemalloc.start()
        t0 = time.perf_counter()
        signal.alarm(5)
        try:
            outcomes[load(path)] += 1
        except Exception as err:  # noqa: BLE001 - every escape is a finding
            outcomes["FAIL"] += 1
            error = f"{type(err).__name__}: {err}"[:300]
            failures.append({"case": i, "seed": name, "ops": ops, "error": error})
        finally:
            signal.alarm(0)
            times.append(time.perf_counter() - t0)
            slow = sorted([*slow, (times[-1], i, name, ops)], reverse=True)[:5]
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    times.sort()
    return {
        "cases": cases, "seed": seed, "seed_file_bytes": {n: len(d) for n, (d, _) in seeds.items()},
        "outcomes": dict(outcomes.most_common()), "failures": failures[:50],
        "seconds_total": round(time.perf_counter() - t_start, 1),
        "case_seconds": {"median": round(times[len(times) // 2], 4),
                         "p99": round(times[int(len(times) * 0.99)], 4), "max": round(times[-1], 4)},
        "slowest": [{"seconds": round(t, 3), "case": i, "seed": n, "ops": o} for t, i, n, o in slow],
        "traced_peak_mib_max": round(max(peaks) / 2**20, 2),
        "maxrss_growth_mib": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    result = run(args.cases, args.seed)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ok = not result["failures"] and result["case_seconds"]["max"] <= 1.0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
