"""How much of an engine decode step the GPU spends in the step's CUDA graph, and how much is host work
around it (scheduling, input copies, the sampled ids' trip to the host, output processing), with the
engine's overlap off (one step at a time) and on (LLMEngine(overlap=True), the default).

Builds the engine as orcd_side.py does, then runs a decode round per stream count and overlap setting
with CUDA events around every decode-graph replay: per step, wall ms (LLMEngine.step) against the
graph's GPU ms (with the overlap on, a replay's events also span its wait for the step before).

usage: python bench/peers/engine_gap.py MODEL.gguf OUT.json [--streams 1,8,64] [--gen 64]
Prints per stream count and overlap: wall ms per step, graph ms per step, the gap, the engine's tok/s
and the graph's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import orcd_side
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams


def timed_graphs(graphs) -> list:
    """Wrap graphs._replay so each replay records (start, end) CUDA events; returns the event list."""
    marks: list = []
    replay = graphs._replay

    def _replay(b: int, n: int):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = replay(b, n)
        end.record()
        marks.append((start, end))
        return out

    graphs._replay = _replay
    return marks


def gap_round(eng, marks: list, streams: int, gen: int, rng: random.Random, overlap: bool) -> dict:
    """One round of `streams` requests; decode-only steps (every row past its first token) timed."""
    eng.overlap = overlap
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    for i in range(streams):
        eng.add_request(EngineRequest(f"gap{streams}-{i}-{rng.random()}",
                                      orcd_side._ids(rng, 128, eng.cfg.vocab_size), sp))
    first: set[str] = set()
    while len(first) < streams:  # prefill steps, untimed
        first |= {ev.request_id for ev in eng.step() if ev.token_id is not None}
    walls: list[float] = []
    marks.clear()
    while eng.has_work():
        t0 = time.perf_counter()
        events = eng.step()
        if any(ev.finished for ev in events):
            break  # the last step releases the requests: not a steady-state step
        walls.append(time.perf_counter() - t0)
    while eng.has_work():
        eng.step()
    torch.cuda.synchronize()
    gpu = [s.elapsed_time(e) for s, e in marks[: len(walls)]]
    wall_ms, gpu_ms = statistics.median(walls) * 1e3, statistics.median(gpu)
    return {"streams": streams, "overlap": overlap, "steps": len(walls), "wall_ms": wall_ms,
            "graph_ms": gpu_ms, "gap_ms": wall_ms - gpu_ms, "engine_tok_s": streams / wall_ms * 1e3,
            "graph_tok_s": streams / gpu_ms * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,64")
    ap.add_argument("--gen", type=int, default=64)
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    engines: list = []
    res = orcd_side.measure(a.model, streams, 128, 32, prefill_len=128, engines=engines)
    eng = engines[0]
    marks = timed_graphs(eng.runner.graph)
    rng = random.Random(2)
    res["gap"] = [gap_round(eng, marks, s, a.gen, rng, on) for s in streams for on in (False, True)]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("streams overlap  wall ms  graph ms  gap ms  engine tok/s  graph tok/s")
    for r in res["gap"]:
        on = "on" if r["overlap"] else "off"
        print(f"{r['streams']:>7} {on:>7} {r['wall_ms']:8.3f} {r['graph_ms']:9.3f} {r['gap_ms']:7.3f} "
              f"{r['engine_tok_s']:13,.0f} {r['graph_tok_s']:12,.0f}")


if __name__ == "__main__":
    main()
