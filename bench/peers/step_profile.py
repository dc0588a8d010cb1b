"""Where a batch-1 decode step's time goes: the CUDA-graph step (FusedDecoder, as `orcd bench` replays it)
under torch.profiler, kernels grouped by name, time per token.

usage: python bench/peers/step_profile.py MODEL.gguf OUT.json [--steps 32]
Prints the graph replay's tok/s (no profiler), then per kernel name: calls per token, µs per token, share.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from kernel_table import kernel_rows, print_rows
from torch.profiler import ProfilerActivity, profile

from orcd.cli.bench_session import OrcdSession


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=32)
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
