"""Drive the int8-activation GEMVs (gemv_int8.py) once per 7B product at M = 1, for Nsight Compute.

usage: ncu --kernel-name regex:'_gemv_i8|_glu_i8' --launch-skip 0 --section SpeedOfLight ... \
           python bench/kernels/gemv_ncu.py [--reps 2]

Each product (bench/kernels/int8_multi.py's PRODUCTS, random K-quant blocks of the 7B shapes) runs
--reps times after one warm-up call that compiles it; profile the launches after the warm-up
(--launch-skip per kernel name, or read the last one of each). Without ncu it prints each product's
time from CUDA events, a rough check that the driver runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers"), str(ROOT / "bench/kernels"), str(ROOT / "tests/gpu")]
from int8_multi import PRODUCTS  # noqa: E402
from products import blocks  # noqa: E402

from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402


def call_for(key, n: int, k: int):
    """A no-argument call of the product `key` (a quant type, or "glu") on fresh random weights."""
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize_x(x)
    if key == "glu":
        g, u = blocks(Q.Q4_K, n, k, 1), blocks(Q.Q4_K, n, k, 2)
        return lambda: glu_q4k_i8(xq, xs, g, u, n, k)
    w = blocks(key, n, k, 3)
    return lambda: gemv_i8(xq, xs, w, n, k, int(key))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    for name, key, n, k, _count in PRODUCTS:
        fn = call_for(key, n, k)
        fn()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(args.reps):
            fn()
        b.record()
        b.synchronize()
        print(f"{name:24s} {getattr(key, 'name', key):5s} {a.elapsed_time(b) * 1e3 / args.reps:8.1f} us")


if __name__ == "__main__":
    main()
