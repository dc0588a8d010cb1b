"""Latency of one all-reduce of a decode step's residual ([B, hidden] bf16) over NCCL, in a CUDA graph.

A TP decode step holds 2 all-reduces per block (o_proj, ffn_down), one for the embedding and the head's
all-gather: 161 at 72B, 57 at 7B. This times them alone, the way the decode graphs run them: R in-place
all-reduces captured in one graph, replayed; and eagerly, for comparison. NCCL variables to compare go
in --env (each variant is a fresh process group; NVLink multicast stays off: runtime.RANK_ENV).

    python bench/tp/allreduce_latency.py --worlds 2,4 --env "" --env NCCL_PROTO=LL --out OUT
On the CPU (gloo, eager only): python bench/tp/allreduce_latency.py --device cpu --worlds 2 --reps 5
Writes OUT/allreduce.json (rows {world, env, hidden, batch, graph_us, eager_us}) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SHAPES = "1x3584,64x3584,1x8192,32x8192"  # batch x hidden: 7B and 72B decode residuals


def _eager_us(x, reps: int, sync) -> float:
    import torch.distributed as dist

    dist.all_reduce(x)
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(x)
    sync()
    return (time.perf_counter() - t0) / reps * 1e6


def _graph_us(x, reps: int) -> float:
    import torch
    import torch.distributed as dist

    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(x)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        for _ in range(reps):
            dist.all_reduce(x)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (5 * reps) * 1e6


def _symm_graph_us(x, reps: int) -> float | None:
    """As _graph_us with orcd's SymmAllReduce (one-shot, peer loads); None where it is unavailable."""
    import torch

    from orcd.distributed.symm_allreduce import make_all_reduce

    ar = make_all_reduce("symm", x.numel(), x.dtype, x.device)
    if ar is None:
        return None
    ar(x, 0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            ar(x, i % 2)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (5 * reps) * 1e6


def _symm_check(ctx) -> bool | None:
    """SymmAllReduce in a graph sums rank-dependent values exactly (small integers in bf16)."""
    import torch

    from orcd.distributed.symm_allreduce import make_all_reduce

    x = torch.empty(8, 8192, dtype=torch.bfloat16, device=ctx.device)
    ar = make_all_reduce("symm", x.numel(), x.dtype, x.device)
    if ar is None:
        return None
    g = torch.cuda.CUDAGraph()
    x.fill_(ctx.rank + 1)
    ar(x, 0)  # eager warm-up
    with torch.cuda.graph(g):
        x.fill_(ctx.rank + 1)
        ar(x, 1)
        ar(x, 0)  # sum twice: world * (world + 1) / 2 * world
    g.replay()
    torch.cuda.synchronize()
    want = ctx.world * (ctx.world + 1) // 2 * ctx.world
    return bool((x == want).all().item())


def rank_fn(ctx, reps: int, env: str, out: str, shapes: str = SHAPES) -> int:
    import torch

    cuda = ctx.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    for b, h in (map(int, s.split("x")) for s in shapes.split(",")):
        x = torch.zeros(b, h, dtype=torch.bfloat16, device=ctx.device)  # zeros: sums stay finite
        row = {"world": ctx.world, "env": env, "hidden": h, "batch": b, "eager_us": _eager_us(x, reps, sync)}
        row["graph_us"] = _graph_us(x, reps) if cuda else None
        row["symm_graph_us"] = _symm_graph_us(x, reps) if cuda else None
        rows.append(row)
    if cuda:
        rows[0]["symm_sums_exact"] = _symm_check(ctx)
    if ctx.rank == 0:
        Path(out).write_text(json.dumps(rows))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--env", action="append", default=None,
                    help='NAME=VAL[,NAME=VAL] set for one variant (repeatable; "" = as is)')
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--shapes", default=SHAPES, help="BATCHxHIDDEN,... (a 512-token 7B prefill: 512x3584)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    from orcd.distributed.runtime import launch

    out, rows = Path(a.out), []
    out.mkdir(parents=True, exist_ok=True)
    for env in a.env or [""]:
        pairs = dict(kv.split("=", 1) for kv in env.split(",") if kv)
        saved = {k: os.environ.get(k) for k in pairs}
        os.environ.update(pairs)  # inherited by the spawned ranks, read by NCCL at init
        try:
            for world in (int(w) for w in a.worlds.split(",")):
                tmp = out / ".allreduce.json"
                if launch(world, a.device, rank_fn, (a.reps, env, str(tmp), a.shapes)) == 0:
                    rows += json.loads(tmp.read_text())
                    tmp.unlink()
                    (out / "allreduce.json").write_text(json.dumps(rows, indent=1))
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    print("| world | env | batch x hidden | NCCL graph us | symm one-shot graph us | NCCL eager us |\n"
          "|---|---|---|---|---|---|")
    for r in rows:
        g, s = (f"{r[k]:.1f}" if r.get(k) is not None else "-" for k in ("graph_us", "symm_graph_us"))
        print(f"| {r['world']} | {r['env'] or 'default'} | {r['batch']} x {r['hidden']} | {g} | {s} | "
              f"{r['eager_us']:.1f} |")
    print("symm sums exact:", [r.get("symm_sums_exact") for r in rows if "symm_sums_exact" in r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
