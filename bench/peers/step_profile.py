"""Where a batch-1 decode step's time goes: the CUDA-graph step (FusedDecoder, as `orcd bench` replays it)
under torch.profiler, kernels grouped by name, time per token.

usage: python bench/peers/step_profile.py MODEL.gguf OUT.json [--steps 32] [--rows 8,64 [--depth 128]]
Prints the graph replay's tok/s (no profiler), then per kernel name: calls per token, µs per token, share.
--rows: R-row steps instead (step_rows.py), each with FusedDecoder's batched_qkv off and on: ms per step,
tok/s, then per kernel name µs per step; a short comparison table last.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from kernel_table import kernel_rows, print_rows
from step_rows import blocks_needed, profile_rows
from torch.profiler import ProfilerActivity, profile

from orcd.cli.bench_session import OrcdSession


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rows", default="", help="comma list of batch rows (R-row steps); empty: batch 1")
    ap.add_argument("--depth", type=int, default=128, help="--rows: tokens already in each sequence")
    a = ap.parse_args()
    if a.rows:
        return rows_main(a)
    s = OrcdSession(a.model, num_blocks=64, page=16)
    rate = s.decode_graph(0, 128, "fused_norm")  # captures the batch-1 graph; tok/s without the profiler
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        s.decode_graph(0, a.steps, "fused_norm")  # 3 warm-up replays + `steps` timed ones
        torch.cuda.synchronize()
    us_per_token, rows = kernel_rows(prof, a.steps + 3, "token", 90)
    res = {"model": a.model, "device": torch.cuda.get_device_name(), "graph_tok_s": rate,
           "graph_ms_per_token": 1e3 / rate, "kernel_us_per_token": us_per_token, "kernels": rows,
           "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"graph replay {rate:,.1f} tok/s ({1e3 / rate:.3f} ms/token); "
          f"kernels {us_per_token:,.0f} us/token")
    print_rows(rows, "token", 14, 90)


SWITCHES = {"qkv3": {"batched_qkv": False}, "qkv1": {"batched_qkv": True}}


def rows_main(a) -> None:
    """--rows: each R-row step with every SWITCHES entry; JSON + a table (ms, tok/s, top kernels)."""
    rows = [int(r) for r in a.rows.split(",")]
    page = 16
    s = OrcdSession(a.model, num_blocks=blocks_needed(max(rows), a.depth, page), page=page)
    res = []
    for r in rows:
        for row in profile_rows(s.model, s.kv, page, s.vocab, r, a.depth, a.steps, SWITCHES):
            res.append(row)
            print(f"\n{r} rows, {row['switch']}: {row['ms_per_step']:.3f} ms/step, "
                  f"{row['tok_s']:,.0f} tok/s; kernels {row['kernel_us_per_step']:,.0f} us/step")
            print_rows(row["kernels"], "step", 14, 90)
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "device": torch.cuda.get_device_name(), "depth": a.depth,
                   "steps": a.steps, "rows": res, "time": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
    print("\nrows  switch  ms/step  tok/s")
    for row in res:
        print(f"{row['rows']:4d}  {row['switch']:6s}  {row['ms_per_step']:7.3f}  {row['tok_s']:8,.0f}")


if __name__ == "__main__":
    main()
