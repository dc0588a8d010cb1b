"""Device time of one TP decode step: the decode graph's replay alone, every rank in lockstep.

tp_scaling.py measures steps through the leader engine (scheduling, the step message, sampling and
the replay); this times the replay alone (inputs copied in, graph replayed, synchronized), so the
difference is the host's share of a step. Every rank builds the same TPModelRunner and replays the same
buckets in the same order (the collectives inside pair up), with each sequence at position --pos.

    python bench/tp/replay_time.py --file q7b.gguf --ranks 1,2 --buckets 1,8,64 --out OUT [--profile 10]
Writes OUT/replay.json: rows {ranks, bucket, pos, replay_ms, gpu}. --profile N: rank 0 also replays each
bucket N more times under torch.profiler; its kernels grouped by name, µs per step (kernel_table.py),
go into the row ("kernels", "kernel_us_per_step") and are printed.
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


def _inputs(b: int, pos: int, device):
    """b sequences at position pos, each in its own run of blocks -> replay()'s arguments."""
    import torch

    per = pos // BLOCK + 1
    tables = torch.arange(b * per, dtype=torch.int32, device=device).view(b, per)
    slots = (tables[:, -1].long() * BLOCK + pos % BLOCK)
    return (torch.zeros(b, dtype=torch.int64, device=device), torch.full((b,), pos, device=device),
            slots, torch.full((b,), pos + 1, dtype=torch.int32, device=device), tables)


def _profile(runner, args, steps: int) -> tuple[float, list[dict]]:
    """(kernel µs per step, kernel rows) of `steps` replays under torch.profiler (this rank's GPU)."""
    import torch
    from kernel_table import kernel_rows
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            runner.graph.replay(*args)
        torch.cuda.synchronize()
    return kernel_rows(prof, steps, "step", 90)


def rank_fn(ctx, path: str, buckets: list[int], pos: int, prof_steps: int, all_reduce: str,
            out: str) -> int:
    import torch
    import torch.distributed as dist

    from orcd.distributed.driver import load_sharded
    from orcd.distributed.tp_runner import TPModelRunner

    loaded = load_sharded(path, ctx, tokenizer=False)
    blocks = max(buckets) * (pos // BLOCK + 1)
    runner = TPModelRunner(loaded, blocks, BLOCK, decode_graphs=True, max_num_seqs=max(buckets),
                           batch_invariant="off", rank=ctx.rank, group=ctx.group,
                           all_reduce=all_reduce)
    rows = []
    for b in buckets:
        args = _inputs(b, pos, ctx.device)
        for _ in range(3):
            runner.graph.replay(*args)
        torch.cuda.synchronize()
        dist.barrier(group=ctx.control)
        t0 = time.perf_counter()
        for _ in range(20):
            runner.graph.replay(*args)
            torch.cuda.synchronize()  # as a step does: the sampled tokens are read back
        ms = (time.perf_counter() - t0) / 20 * 1e3
        row = {"ranks": ctx.world, "all_reduce": all_reduce, "bucket": b, "pos": pos, "replay_ms": ms,
               "fused": runner.graph.fused, "gpu": torch.cuda.get_device_name(ctx.device)}
        if prof_steps:  # every rank replays (the collectives pair up); rank 0's table is kept
            row["kernel_us_per_step"], row["kernels"] = _profile(runner, args, prof_steps)
        rows.append(row)
    if ctx.rank == 0:
        Path(out).write_text(json.dumps(rows))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--buckets", default="1,8,64")
    ap.add_argument("--pos", type=int, default=543, help="position of each sequence's new token")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--all-reduce", default="nccl", choices=["nccl", "symm"], help="TPFusedDecoder's")
    ap.add_argument("--profile", type=int, default=0, help="replays per bucket under torch.profiler")
    a = ap.parse_args()
    buckets = [int(x) for x in a.buckets.split(",")]
    worlds = [int(x) for x in a.ranks.split(",")]
    rows = rows_by_world(worlds, "cuda", rank_fn, (a.file, buckets, a.pos, a.profile, a.all_reduce),
                         Path(a.out), "replay.json")
    for r in rows:
        print(f"TP={r['ranks']} ({r['all_reduce']}) bucket {r['bucket']}: {r['replay_ms']:.3f} ms a replay "
              f"(fused {r['fused']})")
        if "kernels" in r:
            print(f"  kernels {r['kernel_us_per_step']:,.0f} us/step on rank 0")
            print_rows(r["kernels"], "step", 16, 90)
    return 0


if __name__ == "__main__":
    sys.exit(main())
