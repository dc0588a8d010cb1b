"""mmq_q4k_kernel.py's batched Q4_K product (nibbles to 16-bit floats by bit patterns) against mmq.py's
float-w path (today's route for 5..64 decode rows), at the 7B's Q4_K shapes, on CUDA.

usage: python bench/kernels/mmq_q4k.py OUT.json [--ms 8,16,32,64] [--jobs 12]

Each candidate timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py's
method); error = relative error against x @ dequantize(W).T in float64. --jobs N first compiles every
candidate in N processes. Prints, per product and M: µs, TB/s of weight bytes and the error of the
baseline and each launch (BN, warps, stages, MODE); writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers"), str(ROOT / "bench/kernels")]
from mmq_q4k_kernel import mmq4_linear  # noqa: E402
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.dequant import dequantize  # noqa: E402
from orcd.quant.kernels.mmq import mmq_linear  # noqa: E402

SHAPES = [("gate/up 18944x3584", 18944, 3584, 56), ("down 3584x18944", 3584, 18944, 14),
          ("q/o 3584x3584", 3584, 3584, 56), ("k 512x3584", 512, 3584, 42)]  # (name, out, in, calls/token)
LAUNCHES = [(bn, w, st, mode) for mode in (0, 1) for bn, w, st in
            ((128, 4, 3), (64, 4, 3), (128, 8, 3), (64, 4, 4), (128, 4, 2), (256, 8, 3))]


def candidates(targets: tuple[int, ...] = ()) -> dict:
    """Today's kernel, then each mmq4 launch; with targets: today's kernel and mmq4's LAUNCHES[7] at each
    split-K target (programs) instead."""
    c = {"mmq float_w (today)": lambda x, r, n, k: mmq_linear(x, r, n, k, Q.Q4_K, float_w=True)}
    if targets:
        for t in targets:
            c[f"today target {t}"] = partial(
                lambda x, r, n, k, t: mmq_linear(x, r, n, k, Q.Q4_K, float_w=True, target=t), t=t)
            c[f"mmq4 {LAUNCHES[7]} target {t}"] = partial(
                lambda x, r, n, k, t: mmq4_linear(x, r, n, k, launch=LAUNCHES[7], target=t), t=t)
        return c
    for lc in LAUNCHES:
        c[f"mmq4 {lc}"] = partial(lambda x, r, n, k, lc: mmq4_linear(x, r, n, k, launch=lc), lc=lc)
    return c


def warm(ms: list[int], job: int, jobs: int, targets: tuple[int, ...]) -> None:
    """Run this process's share of the candidates once on small weights (compiles them)."""
    raw = blocks(Q.Q4_K, 512, 3584, 0)
    for i, f in enumerate(candidates(targets).values()):
        if i % jobs == job:
            for m in ms:
                f(torch.randn(m, 3584, device="cuda", dtype=torch.bfloat16), raw, 512, 3584)
    torch.cuda.synchronize()


def error(f, m: int, n: int, k: int) -> float:
    raw = blocks(Q.Q4_K, n, k, 99)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = dequantize(raw.cpu().view(-1), Q.Q4_K, (n, k)).double()
    ref = x.cpu().double() @ w.T
    y = f(x, raw, n, k).cpu().double()
    return ((y - ref).norm() / ref.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ms", default="8,16,32,64")
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--targets", default="", help="comma list: split-K targets instead of the launch sweep")
    ap.add_argument("--warm-job", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    targets = tuple(int(v) for v in a.targets.split(",") if v)
    if a.warm_job >= 0:
        return warm(ms, a.warm_job, a.jobs, targets)
    procs = [subprocess.Popen([sys.executable, __file__, a.out, "--ms", a.ms, "--jobs", str(a.jobs),
                               "--targets", a.targets, "--warm-job", str(j)]) for j in range(a.jobs)]
    for p in procs:
        p.wait()
    bw = copy_bandwidth()
    rows = []
    for name, n, k, calls in SHAPES:
        wbytes = n * k // 256 * 144
        raws = [blocks(Q.Q4_K, n, k, i) for i in range(copies_for(wbytes))]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for kname, f in candidates(targets).items():
                t = graph_time([partial(f, x, r, n, k) for r in raws])
                err = error(f, m, min(n, 4096), k) if m in (ms[0], ms[-1]) else None
                rows.append({"name": name, "m": m, "kernel": kname, "us": t * 1e6, "TBps": wbytes / t / 1e12,
                             "floor_us": wbytes / bw * 1e6, "calls_per_token": calls, "err": err})
                e = f"{err:.1e}" if err is not None else ""
                print(f"{name:<20}{m:>3} {kname:<28}{t * 1e6:>9.1f} us {wbytes / t / 1e12:5.2f} TB/s {e}",
                      flush=True)
        del raws
        Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "copy_TBps": bw / 1e12,
                                           "rows": rows}, indent=1))
    print("\nper M, one 7B step's Q4_K products (sum of calls x µs): today vs the best other candidate "
          "per product")
    for m in ms:
        today = best = 0.0
        for name, _n, _k, calls in SHAPES:
            rs = [r for r in rows if r["name"] == name and r["m"] == m]
            today += calls * next(r["us"] for r in rs if "today" in r["kernel"])
            best += calls * min(r["us"] for r in rs if r["kernel"] != "mmq float_w (today)")
        print(f"M {m:>3}: today {today / 1e3:.2f} ms, best {best / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
