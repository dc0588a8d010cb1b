"""Launch shapes of the Q8_0 float GEMV (fused_linear.launch_gemv) at gpt-oss-20b's attention and head
shapes, one token, bf16 x, from a CUDA graph (kernel_times.graph_ms) over enough weight copies to defeat
the 50 MB L2. Prints, per shape, the code's own plan and the best few (G, BO, warps, K splits) with GB/s.

usage: python bench/kernels/gpt_oss_q8_sweep.py OUT.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from gpu_blocks import random_blocks  # noqa: E402
from kernel_times import graph_time_ms  # noqa: E402

from orcd.quant.kernels.fused_linear import gemv_plan, launch_gemv  # noqa: E402

SHAPES = {"q": (4096, 2880), "k/v": (512, 2880), "o": (2880, 4096), "head": (201088, 2880)}  # (out, in)
CANDIDATES = list(itertools.product((8, 16), (2, 4, 8), (1, 2, 4), (1, 2)))  # G, BO, warps, K splits


def sweep(name: str, out_f: int, in_f: int) -> dict:
    row_bytes = in_f // 32 * 34
    copies = max(1, -(-200_000_000 // (out_f * row_bytes)))  # > 4x L2
    raws = [random_blocks(T.Q8_0, out_f, in_f, seed=i).cuda() for i in range(min(copies, 8))]
    raws = (raws * -(-copies // len(raws)))[:copies]  # repeats past 8 distinct copies still miss L2
    x = torch.randn(1, in_f, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, out_f, device="cuda", dtype=torch.bfloat16)
    rows = []
    plan = gemv_plan(T.Q8_0, out_f, in_f)
    for g, bo, w, s in [plan, *CANDIDATES]:
        if s > 1 and -(-in_f // (g * 32)) < s:
            continue

        def run(g=g, bo=bo, w=w, s=s):
            for raw in raws:
                launch_gemv(x, raw, y, T.Q8_0, out_f, in_f, g, bo, w, s)

        try:
            ms = graph_time_ms(run) / len(raws)
        except Exception as err:  # noqa: BLE001 - a shape the kernel cannot take: skipped, named
            print(f"{name} {(g, bo, w, s)} failed: {str(err).splitlines()[0][:80]}")
            continue
        rows.append({"launch": [g, bo, w, s], "us": ms * 1e3, "gb_s": out_f * row_bytes / ms / 1e6,
                     "plan": [g, bo, w, s] == list(plan)})
    rows.sort(key=lambda r: r["us"])
    return {"shape": [out_f, in_f], "plan": list(plan), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    a = ap.parse_args()
    res = {name: sweep(name, *shape) for name, shape in SHAPES.items()}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for name, r in res.items():
        own = next(x for x in r["rows"] if x["plan"])
        print(f"{name} {r['shape']}: plan {r['plan']} {own['us']:.1f} us ({own['gb_s']:.0f} GB/s); best:",
              "; ".join(f"{x['launch']} {x['us']:.1f} us {x['gb_s']:.0f} GB/s" for x in r["rows"][:4]))


if __name__ == "__main__":
    main()
