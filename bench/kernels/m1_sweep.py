"""The 7B's one-row int8 GEMVs over a grid of launch shapes (issue 16: at one stream q/k/v ran at 24 % of the
copy rate, o at 40 %, the downs at ~52 %; docs/performance.md, "Where the 7B's one-stream step stands").

Products, the 7B Q4_K_M's types and shapes: q/k/v in one launch (gemv3_i8: Q4_K 3584 + Q4_K 512 + Q6_K
split 512, x 3584) over BO rows per program and warps; o (Q4_K 3584 x 3584), down (Q4_K and split Q6_K,
3584 x 18944) over (G, BO, warps). Each timed alone from a CUDA graph over >= 200 MB of weight copies
(bench/peers/products.py); TB/s = weight bytes / time. The default launch is marked; the best per product
printed last.

usage: python bench/kernels/m1_sweep.py OUT.json
       TRITON_INTERPRET=1 python bench/kernels/m1_sweep.py OUT.json --dry   (CPU: small shapes)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
import products  # noqa: E402
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.gemv3_int8 import BO3, gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.int8_launch import I8_LAUNCH  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

K, FFN = 3584, 18944
GEMV_GRID = {12: list(itertools.product([32, 64], [1, 2, 4, 8], [1, 2, 4])),
             14: list(itertools.product([4, 8, 16], [2, 4, 8, 16], [2, 4]))}
QKV_GRID = list(itertools.product([1, 2, 4, 8], [1, 2, 4]))  # (BO, warps)


def timed(name: str, launch, fns, nbytes: int, default: bool) -> dict:
    try:
        t = graph_time(fns)
    except Exception as err:  # noqa: BLE001 - a launch shape that does not compile or fit: recorded
        return {"product": name, "launch": launch, "error": str(err).splitlines()[0][:200]}
    row = {"product": name, "launch": launch, "us": t * 1e6, "TBps": nbytes / t / 1e12, "default": default}
    mark = "  (default)" if default else ""
    print(f"{name:<22} {str(launch):<14} {row['us']:8.2f} us {row['TBps']:5.2f} TB/s{mark}", flush=True)
    return row


def qkv_rows(xq, xs) -> list[dict]:
    shapes = [(K, Q.Q4_K), (512, Q.Q4_K), (512, Q.Q6_K)]
    raw = [blocks(qt, n, K, 10 + i) for i, (n, qt) in enumerate(shapes)]
    nbytes = sum(r.numel() for r in raw)
    copies = []
    for c in range(copies_for(nbytes)):
        ws = [r if c == 0 else r.clone() for r in raw]
        ws[2] = split_q6_k(ws[2])
        copies.append([(w, n, int(qt), None) for w, (n, qt) in zip(ws, shapes, strict=True)])
    split = (False, False, True)
    return [timed("q/k/v 4608x3584", (bo, w), [partial(gemv3_i8, xq, xs, ws, K, torch.bfloat16, bo, split, w)
                                               for ws in copies], nbytes, (bo, w) == (BO3, 4))
            for bo, w in QKV_GRID]


def gemv_rows(name: str, qt: int, n: int, k: int, seed: int) -> list[dict]:
    xq, xs = quantize_x(torch.randn(1, k, device=products.DEV, dtype=torch.bfloat16))
    raw = blocks(Q(qt), n, k, seed)
    split = qt == 14
    ws = [split_q6_k(raw) if split else raw] + [split_q6_k(raw.clone()) if split else raw.clone()
                                                 for _ in range(copies_for(raw.numel()) - 1)]
    default = I8_LAUNCH[1][qt]
    rows = []
    for launch in GEMV_GRID[qt]:
        fns = [partial(gemv_i8, xq, xs, w, n, k, qt, launch=launch, split=split) for w in ws]
        rows.append(timed(name, launch, fns, raw.numel(), launch == default))
    return rows


def main() -> None:
    global K, FFN, GEMV_GRID, QKV_GRID
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dry", action="store_true", help="small shapes, two launches each (the CPU path)")
    a = ap.parse_args()
    out = Path(a.out)
    if a.dry:
        K, FFN = 512, 1024
        GEMV_GRID = {12: [(64, 4, 4), (32, 1, 1)], 14: [(8, 8, 4), (4, 2, 2)]}
        QKV_GRID = [(4, 4), (1, 1)]
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    xq, xs = quantize_x(torch.randn(1, K, device=products.DEV, dtype=torch.bfloat16))
    rows = qkv_rows(xq, xs)
    rows += gemv_rows("o 3584x3584 Q4_K", 12, K, K, 20)
    rows += gemv_rows("down 3584x18944 Q4_K", 12, K, FFN, 21)
    rows += gemv_rows("down 3584x18944 Q6_K", 14, K, FFN, 22)
    dev = torch.cuda.get_device_name() if products.DEV == "cuda" else "cpu"
    res = {"device": dev, "copy_TBps": bw / 1e12, "rows": rows}
    out.write_text(json.dumps(res, indent=1))
    print("\n| product | default µs | best launch | best µs | best TB/s |\n|---|---|---|---|---|")
    for name in dict.fromkeys(r["product"] for r in rows):
        ok = [r for r in rows if r["product"] == name and "us" in r]
        best = min(ok, key=lambda r: r["us"])
        dflt = next((r["us"] for r in ok if r["default"]), float("nan"))
        print(f"| {name} | {dflt:.2f} | {best['launch']} | {best['us']:.2f} | {best['TBps']:.2f} |")


if __name__ == "__main__":
    main()
