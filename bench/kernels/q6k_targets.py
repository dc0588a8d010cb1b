"""batched_linear on split-layout Q6_K weights (the 7B's Q6_K downs and LM head, 5..64 decode rows) at
several split-K targets (programs) and launches, on CUDA: the Q6_K half of what mmq.MMQ_TARGET did for Q4_K.

usage: python bench/kernels/q6k_targets.py OUT.json [--ms 8,16,64] [--targets 264,528,1056]

Each candidate timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py's
method). Prints µs and TB/s of weight bytes per product, M, target and launch; writes OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "bench/peers")]
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.batched_linear import batched_linear, mm_plan  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402

SHAPES = [("down 3584x18944", 3584, 18944, 14), ("lm_head 152064x3584", 152064, 3584, 1)]
LAUNCHES = [None, (32, 4, 2), (64, 4, 3), (64, 8, 2)]  # (BN, warps, stages); None: mm_plan's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ms", default="8,16,64")
    ap.add_argument("--targets", default="264,528,1056")
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    targets = [int(v) for v in a.targets.split(",")]
    bw = copy_bandwidth()
    rows = []
    for name, n, k, calls in SHAPES:
        wbytes = n * k // 256 * 210
        raws = [split_q6_k(blocks(Q.Q6_K, n, k, i)) for i in range(copies_for(wbytes))]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for lc in LAUNCHES:
                for t in targets:
                    f = partial(batched_linear, out_features=n, in_features=k, qtype=Q.Q6_K, launch=lc,
                                target=t, split=True)
                    us = graph_time([partial(f, x, r) for r in raws]) * 1e6
                    plan = mm_plan(Q.Q6_K, m, n, k, lc, t)
                    rows.append({"name": name, "m": m, "launch": lc, "target": t, "plan": plan, "us": us,
                                 "TBps": wbytes / us / 1e6, "floor_us": wbytes / bw * 1e6, "calls": calls})
                    print(f"{name:<20}{m:>3} {str(lc):<14}{t:>5} {us:9.1f} us {wbytes / us / 1e6:5.2f} TB/s "
                          f"plan {plan}", flush=True)
        del raws
        Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
