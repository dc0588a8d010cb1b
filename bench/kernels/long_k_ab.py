"""A/B of gemv_int8's one-token launch for long Q4_K rows (LONG_K_LAUNCH: one row per program, for the 7B's
down, K 18944) against the table's (I8_LAUNCH[1][12], BO 4): the batch-1 decode graph (FusedDecoder,
norms in the GEMVs, as `orcd bench` replays it) captured anew for each variant, alternated --reps times,
tok/s of --steps replays each.

usage: python bench/kernels/long_k_ab.py MODEL.gguf OUT.json [--reps 3] [--steps 256]
"""

from __future__ import annotations

import argparse
import json

import torch

from orcd.cli.bench_session import OrcdSession
from orcd.quant.kernels import gemv_int8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=256)
    a = ap.parse_args()
    s = OrcdSession(a.model, num_blocks=64, page=16)
    long_k = gemv_int8.LONG_K
    rates: dict[str, list[float]] = {"table": [], "long_k": []}
    for _ in range(a.reps):
        for name, limit in (("table", 1 << 30), ("long_k", long_k)):
            gemv_int8.LONG_K = limit  # read at each launch, so at the capture
            s.graphs.pop("fused_norm", None)
            rates[name].append(s.decode_graph(0, a.steps, "fused_norm"))
            print(f"{name:8s} {rates[name][-1]:8.1f} tok/s", flush=True)
    gemv_int8.LONG_K = long_k
    res = {"model": a.model, "device": torch.cuda.get_device_name(), "steps": a.steps, "tok_s": rates,
           "median": {k: sorted(v)[len(v) // 2] for k, v in rates.items()}}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"median tok/s: table {res['median']['table']:.1f}, long_k {res['median']['long_k']:.1f}")


if __name__ == "__main__":
    main()
