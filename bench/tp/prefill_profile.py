"""Where a tensor-parallel prefill step goes: one prompt's eager forward on every rank, timed, then
under torch.profiler on rank 0 (kernels grouped by name, µs per step; the step's wall time against the
sum of its kernels says whether the host or the device bounds it).

TP prefill runs eagerly (no prefill graphs under TP, tp_runner.py); at 7B it was 2-2.6x slower at TP=2
than at TP=1 (bench/tp/README.md). Every rank builds the same TPModelRunner (no graphs) and runs the same
steps in the same order, so the row-parallel all-reduces pair up.

    python bench/tp/prefill_profile.py --file q7b.gguf --ranks 1,2 --tokens 512 --out OUT
Writes OUT/prefill.json: rows {ranks, tokens, step_ms, kernel_us_per_step, kernels, host_ops, device}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from kernel_table import print_rows  # noqa: E402
from worlds import rows_by_world  # noqa: E402

BLOCK = 16


def _step(tokens: int):
    """One fresh prompt of `tokens` ids in its own run of blocks -> a SchedulerOutput."""
    from orcd.engine.io import ScheduledSeq, SchedulerOutput
    from orcd.engine.sampling_params import SamplingParams

    ids = [(7 + 31 * i) % 1000 for i in range(tokens)]
    table = list(range((tokens + BLOCK - 1) // BLOCK))
    return SchedulerOutput([ScheduledSeq(0, ids, 0, table, True, SamplingParams())], tokens)


def host_rows(prof, steps: int, top: int = 12) -> list[dict]:
    """The host's slowest operators (self time: a cudaFree or a synchronize that waits shows here), per
    step: rows {"op", "calls_per_step", "self_ms_per_step"}."""
    avg = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return [{"op": e.key[:60], "calls_per_step": e.count / steps,
             "self_ms_per_step": e.self_cpu_time_total / steps / 1e3} for e in avg]


def rank_fn(ctx, path: str, tokens: int, reps: int, out: str) -> int:
    import torch
    import torch.distributed as dist
    from kernel_table import kernel_rows
    from torch.profiler import ProfilerActivity, profile

    from orcd.distributed.driver import load_sharded
    from orcd.distributed.tp_runner import TPModelRunner

    def sync():
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)

    loaded = load_sharded(path, ctx, tokenizer=False)
    runner = TPModelRunner(loaded, tokens // BLOCK + 2, BLOCK, decode_graphs=False, max_num_seqs=1,
                           batch_invariant="off", rank=ctx.rank, group=ctx.group)
    sched = _step(tokens)
    for _ in range(3):  # warm-up: kernels compiled / autotuned
        runner.forward(sched)
    sync()
    dist.barrier(group=ctx.control)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        runner.forward(sched)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    us, rows, host = 0.0, [], []  # no kernel table off CUDA
    if ctx.device.type == "cuda":
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                runner.forward(sched)
            sync()
        us, rows = kernel_rows(prof, 3, "step", 90)
        host = host_rows(prof, 3)
    if ctx.rank == 0:
        row = {"ranks": ctx.world, "tokens": tokens, "step_ms": sorted(times)[reps // 2],
               "kernel_us_per_step": us, "kernels": rows, "host_ops": host, "device": str(ctx.device)}
        Path(out).write_text(json.dumps([row]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    worlds = [int(x) for x in a.ranks.split(",")]
    rows = rows_by_world(worlds, a.device, rank_fn, (a.file, a.tokens, a.reps), Path(a.out), "prefill.json")
    for r in rows:
        rate = r["tokens"] / r["step_ms"] * 1e3
        print(f"TP={r['ranks']}: {r['tokens']} tokens in {r['step_ms']:.2f} ms ({rate:,.0f} tok/s); "
              f"kernels {r['kernel_us_per_step']:,.0f} us/step")
        print_rows(r["kernels"], "step", 14, 90)
        for h in r.get("host_ops", []):
            print(f"  host {h['self_ms_per_step']:8.2f} ms {h['calls_per_step']:7.1f}x  {h['op']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
