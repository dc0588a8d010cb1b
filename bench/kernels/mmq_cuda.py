"""The CUDA-C tensor-core Q4_K product (orcd/quant/kernels/mmq_cuda.py) against today's route for
decode batches (mmq.py's bf16-weight Triton kernel), at the 7B's Q4_K shapes, on CUDA.

usage: python bench/kernels/mmq_cuda.py OUT.json [--ms 5,8,16,32,64] [--launches 8x1,4x2,...]

Each product timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py's
method: time = median replay / launches; floor = weight bytes /
the measured copy rate). Also the first call's seconds (NVRTC + the driver compiling a new
configuration). Writes OUT.json (rows) and prints a table: µs per product, and TB/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]

# (name, out, in) of the 7B's Q4_K products: q/o, k, gate/up, down
P7B = [("q/o 3584x3584", 3584, 3584), ("k 512x3584", 512, 3584), ("gate/up 18944x3584", 18944, 3584),
       ("down 3584x18944", 3584, 18944)]


def _cuda(x, r, n, k, launch):
    from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear

    return mmq_cuda_linear(x, r, n, k, launch=launch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ms", default="5,8,16,32,64", help="decode rows")
    ap.add_argument("--launches", default="8x1,4x1,16x1,4x2,8x2,2x4",
                    help="mmq_cuda (warps x 16-row tiles) launches to time beside its default")
    args = ap.parse_args()
    from products import blocks, copies_for, copy_bandwidth, graph_time

    from orcd.quant.kernels.mmq import mmq_linear
    from orcd.quant.kernels.mmq_cuda import check_launch, default_launch

    bw = copy_bandwidth()  # bytes read + written per second by a copy: a read-only kernel's ceiling
    launches = [tuple(int(v) for v in s.split("x")) for s in args.launches.split(",") if s]
    rows = []
    for name, n, k in P7B:
        nbytes = n * k // 256 * 144
        ws = [blocks(Q.Q4_K, n, k, seed=s) for s in range(copies_for(nbytes))]
        for m in (int(v) for v in args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cands = {"mmq_bf16w": lambda r, x=x, n=n, k=k: mmq_linear(x, r, n, k, Q.Q4_K, float_w=True)}
            for nw, mt in dict.fromkeys([default_launch(k, m), *launches]):
                try:
                    check_launch(nw, mt, -(-m // 8))
                except ValueError:
                    continue
                cands[f"cuda {nw}x{mt}"] = partial(_cuda, x, n=n, k=k, launch=(nw, mt))
            for cand, f in cands.items():
                t0 = time.perf_counter()
                f(ws[0])
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0  # the first call: compiles a configuration not seen yet
                t = graph_time([lambda f=f, r=r: f(r) for r in ws])
                rows.append({"product": name, "m": m, "kernel": cand, "us": t * 1e6,
                             "tb_s": nbytes / t / 1e12, "floor_us": nbytes / bw * 1e6,
                             "first_call_s": first_s})
                print(f"{name:22s} M={m:3d} {cand:12s} {t * 1e6:8.1f} us {nbytes / t / 1e12:5.2f} TB/s "
                      f"(first call {first_s:.2f} s)",
                      flush=True)
    result = {"device": torch.cuda.get_device_name(), "read_bw": bw, "rows": rows}
    args.out.write_text(json.dumps(result, indent=1))
    print("\n| product | M | mmq bf16-w us | best cuda | us | floor us |\n|---|---|---|---|---|---|")
    for name, _, _ in P7B:
        for m in sorted({r["m"] for r in rows}):
            sel = [r for r in rows if r["product"] == name and r["m"] == m]
            base = next(r for r in sel if r["kernel"] == "mmq_bf16w")
            best = min((r for r in sel if r["kernel"] != "mmq_bf16w"), key=lambda r: r["us"])
            cells = [name, m, f"{base['us']:.1f}", best["kernel"], f"{best['us']:.1f}",
                     f"{base['floor_us']:.1f}"]
            print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
