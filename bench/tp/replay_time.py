"""Device time of one TP decode step: the decode graph's replay alone, every rank in lockstep.

tp_scaling.py measures steps through the leader engine (scheduling, the step message, sampling and
the replay); this times the replay alone (inputs copied in, graph replayed, synchronized), so the
difference is the host's share of a step. Every rank builds the same TPModelRunner and replays the same
buckets in the same order (the collectives inside pair up), with each sequence at position --pos.

    python bench/tp/replay_time.py --file q7b.gguf --ranks 1,2 --buckets 1,8,64 --out OUT
Writes OUT/replay.json: rows {ranks, bucket, pos, replay_ms, gpu}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BLOCK = 16


def _inputs(b: int, pos: int, device):
    """b sequences at position pos, each in its own run of blocks -> replay()'s arguments."""
    import torch

    per = pos // BLOCK + 1
    tables = torch.arange(b * per, dtype=torch.int32, device=device).view(b, per)
    slots = (tables[:, -1].long() * BLOCK + pos % BLOCK)
    return (torch.zeros(b, dtype=torch.int64, device=device), torch.full((b,), pos, device=device),
            slots, torch.full((b,), pos + 1, dtype=torch.int32, device=device), tables)


def rank_fn(ctx, path: str, buckets: list[int], pos: int, out: str) -> int:
    import torch
    import torch.distributed as dist

    from orcd.distributed.driver import load_sharded
    from orcd.distributed.tp_runner import TPModelRunner

    loaded = load_sharded(path, ctx, tokenizer=False)
    blocks = max(buckets) * (pos // BLOCK + 1)
    runner = TPModelRunner(loaded, blocks, BLOCK, decode_graphs=True, max_num_seqs=max(buckets),
                           batch_invariant="off", rank=ctx.rank, group=ctx.group)
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
        rows.append({"ranks": ctx.world, "bucket": b, "pos": pos, "replay_ms": ms,
                     "fused": runner.graph.fused, "gpu": torch.cuda.get_device_name(ctx.device)})
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
    a = ap.parse_args()
    from orcd.distributed.runtime import launch

    out, rows = Path(a.out), []
    out.mkdir(parents=True, exist_ok=True)
    buckets = [int(x) for x in a.buckets.split(",")]
    for n in (int(x) for x in a.ranks.split(",")):
        tmp = out / ".replay.json"
        if launch(n, "cuda", rank_fn, (a.file, buckets, a.pos, str(tmp))) == 0:
            rows += json.loads(tmp.read_text())
            tmp.unlink()
            (out / "replay.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(f"TP={r['ranks']} bucket {r['bucket']}: {r['replay_ms']:.3f} ms a replay (fused {r['fused']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
