"""What one engine step's message costs on the wire of `orcd serve --engine-process` (orcd.engine.ipc).

A step at B streams sends B TokenEvents plus the engine's stats dict. This times, per step, pickling
and unpickling them as TokenEvent dataclasses and as the plain tuples orcd.engine.ipc sends, and the
round trip of one such message between two processes over the socket pair multiprocessing.Pipe opens.
Writes OUT/serving_ipc_cost.json and .md.

Usage: python bench/serving/ipc_cost.py [--streams 1,8,32,64] [--out-dir bench/results]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pickle
import platform
import sys
import time
from pathlib import Path

from orcd.engine import ipc
from orcd.engine.io import TokenEvent

STATS = {f"key_{i}": i * 1.5 for i in range(24)}  # the size of LLMEngine.stats()


def step_events(n: int) -> list[TokenEvent]:
    return [TokenEvent(f"{i:032x}", 1000 + i, " word", 57, prompt_tokens=128, generated_tokens=58)
            for i in range(n)]


def per_call_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def _echo(conn) -> None:
    while True:
        data = conn.recv_bytes()
        if not data:
            return
        conn.send_bytes(data)


def round_trip_us(payload: bytes, n: int) -> float:
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_echo, args=(there,), daemon=True)
    proc.start()
    for _ in range(50):
        here.send_bytes(payload)
        here.recv_bytes()
    t0 = time.perf_counter()
    for _ in range(n):
        here.send_bytes(payload)
        here.recv_bytes()
    us = (time.perf_counter() - t0) / n * 1e6
    here.send_bytes(b"")
    proc.join(10)
    return us


def row(streams: int, n: int) -> dict:
    events = step_events(streams)
    as_objects = ("step", events, STATS)
    as_tuples = ("step", [ipc.event_to_wire(e) for e in events], STATS)
    obj_bytes, tup_bytes = pickle.dumps(as_objects, protocol=5), ipc.dumps(as_tuples)
    return {
        "streams": streams,
        "dataclass_bytes": len(obj_bytes), "tuple_bytes": len(tup_bytes),
        "dataclass_dump_load_us": round(per_call_us(
            lambda: pickle.loads(pickle.dumps(as_objects, protocol=5)), n), 1),
        "tuple_dump_load_us": round(per_call_us(
            lambda: [ipc.event_from_wire(t) for t in ipc.loads(ipc.dumps(
                ("step", [ipc.event_to_wire(e) for e in events], STATS)))[1]], n), 1),
        "pipe_round_trip_us": round(round_trip_us(tup_bytes, n), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--n", type=int, default=2000, help="calls per figure")
    ap.add_argument("--out-dir", default="bench/results")
    args = ap.parse_args(argv)
    rows = [row(int(s), args.n) for s in args.streams.split(",")]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    machine = f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    (out / "serving_ipc_cost.json").write_text(json.dumps({"machine": machine, "command": " ".join(
        ["python", *sys.argv]), "rows": rows}, indent=1))
    lines = [f"Per engine step ({machine}); `dump+load` includes building the events on the receiving side "
             "for tuples.", "",
             "| streams | dataclass bytes | tuple bytes | dataclass dump+load µs | tuple dump+load µs "
             "| pipe round trip µs |", "|---|---|---|---|---|---|"]
    keys = ("streams", "dataclass_bytes", "tuple_bytes", "dataclass_dump_load_us", "tuple_dump_load_us",
            "pipe_round_trip_us")
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    (out / "serving_ipc_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
