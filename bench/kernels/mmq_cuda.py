"""The CUDA-C tensor-core products (orcd/quant/kernels/mmq_cuda.py) against the routes they replace for
decode batches, at the 7B's Q4_K and Q6_K shapes, on CUDA; optionally the engine with each routing.

usage: python bench/kernels/mmq_cuda.py OUT.json [--ms 5,8,16,32,64] [--launches 8x1,16x1,...]
                                        [--engine 7B.gguf --streams 5,8,16 --gen 64 --routes none,q4k,all]

Kernels: each product timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/
products.py's method: time = median replay / launches; floor = weight bytes / the measured copy rate),
beside the route it replaces: Q4_K mmq.py's bf16-weight Triton kernel, Q6_K (split layout) batched_linear.
Also the first call's seconds (NVRTC + the driver compiling a new configuration).
--engine: then the engine's decode tok/s (bench/peers/orcd_side.py's measure, one engine per routing,
built fresh) with mmq_cuda.ROUTED set to: none (mmq.py / batched_linear as before session 19), q4k
(Q4_K only, the committed default), all (Q4_K and split Q6_K).
Writes OUT.json and prints tables: µs per product and TB/s; engine tok/s per routing.
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

# (name, type, out, in) of the 7B's products the kernels take: Q4_K q/o, k, gate/up, down; Q6_K v, down,
# the LM head
P7B = [("q/o 3584x3584", Q.Q4_K, 3584, 3584), ("k 512x3584", Q.Q4_K, 512, 3584),
       ("gate/up 18944x3584", Q.Q4_K, 18944, 3584), ("down 3584x18944", Q.Q4_K, 3584, 18944),
       ("v 512x3584", Q.Q6_K, 512, 3584), ("down 3584x18944", Q.Q6_K, 3584, 18944),
       ("lm_head 152064x3584", Q.Q6_K, 152064, 3584)]
ROUTES = {"none": (), "q4k": ((Q.Q4_K, False),), "all": ((Q.Q4_K, False), (Q.Q6_K, True))}


def _cuda(x, r, n, k, launch, qt):
    from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear

    return mmq_cuda_linear(x, r, n, k, launch=launch, qtype=qt)


def _today(x, r, n, k, qt):
    """The route before mmq_cuda: mmq.py's bf16-w kernel (Q4_K), batched_linear on the split layout (Q6_K)."""
    from orcd.quant.kernels.batched_linear import batched_linear
    from orcd.quant.kernels.mmq import mmq_linear

    if qt == Q.Q4_K:
        return mmq_linear(x, r, n, k, qt, float_w=True)
    return batched_linear(x, r, n, k, qt, split=True)


def kernel_rows(ms: list[int], launches: list[tuple[int, int]]) -> list[dict]:
    from products import blocks, copies_for, copy_bandwidth, graph_time

    from orcd.quant.kernels.layout import row_bytes, split_q6_k
    from orcd.quant.kernels.mmq_cuda import check_launch, default_launch

    bw = copy_bandwidth()  # bytes read + written per second by a copy: a read-only kernel's ceiling
    rows = []
    for name, qt, n, k in P7B:
        nbytes = n * row_bytes(qt, k)
        ws = [blocks(qt, n, k, seed=s) for s in range(copies_for(nbytes))]
        ws = [split_q6_k(w) for w in ws] if qt == Q.Q6_K else ws
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cands = {"today": partial(_today, x, n=n, k=k, qt=qt)}
            for nw, mt in dict.fromkeys([default_launch(k, m), *launches]):
                try:
                    check_launch(nw, mt, -(-m // 8))
                except ValueError:
                    continue
                cands[f"cuda {nw}x{mt}"] = partial(_cuda, x, n=n, k=k, launch=(nw, mt), qt=qt)
            for cand, f in cands.items():
                t0 = time.perf_counter()
                f(ws[0])
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0  # the first call: compiles a configuration not seen yet
                t = graph_time([lambda f=f, r=r: f(r) for r in ws])
                row = {"product": f"{name} {qt.name}", "m": m, "kernel": cand, "us": t * 1e6,
                       "tb_s": nbytes / t / 1e12, "floor_us": nbytes / bw * 1e6, "first_call_s": first_s}
                rows.append(row)
                print(f"{row['product']:25s} M={m:3d} {cand:10s} {row['us']:8.1f} us {row['tb_s']:5.2f} TB/s "
                      f"(first call {first_s:.2f} s)", flush=True)
    return rows


def kernel_table(rows: list[dict]) -> str:
    out = ["| product | M | today us | best cuda | us | floor us |", "|---|---|---|---|---|---|"]
    for prod in dict.fromkeys(r["product"] for r in rows):
        for m in sorted({r["m"] for r in rows}):
            sel = [r for r in rows if r["product"] == prod and r["m"] == m]
            base = next(r for r in sel if r["kernel"] == "today")
            best = min((r for r in sel if r["kernel"] != "today"), key=lambda r: r["us"])
            cells = [prod, m, f"{base['us']:.1f}", best["kernel"], f"{best['us']:.1f}",
                     f"{base['floor_us']:.1f}"]
            out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out)


def engine_runs(model: str, streams: list[int], gen: int, routes: list[str]) -> dict:
    from orcd_side import measure

    import orcd.quant.kernels.mmq_cuda as mmq_cuda

    runs = {}
    for route in routes:
        mmq_cuda.ROUTED = ROUTES[route]
        runs.setdefault(route, []).append(measure(model, streams, prompt=128, gen=gen))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ms", default="5,8,16", help="decode rows of the kernel table ('' skips it)")
    ap.add_argument("--launches", default="8x1,16x1,8x2,4x2",
                    help="mmq_cuda (warps x 16-row tiles) launches to time beside its default")
    ap.add_argument("--engine", help="a GGUF file: also the engine's decode tok/s under each routing")
    ap.add_argument("--streams", default="5,8,16")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--routes", default="none,q4k,all", help=f"routings, of {list(ROUTES)} (repeats allowed)")
    args = ap.parse_args()
    result = {"device": torch.cuda.get_device_name()}
    ms = [int(v) for v in args.ms.split(",") if v]
    if ms:
        launches = [tuple(int(v) for v in s.split("x")) for s in args.launches.split(",") if s]
        result["rows"] = kernel_rows(ms, launches)
        args.out.write_text(json.dumps(result, indent=1))
    if args.engine:
        streams = [int(v) for v in args.streams.split(",")]
        result["engine"] = engine_runs(args.engine, streams, args.gen, args.routes.split(","))
        args.out.write_text(json.dumps(result, indent=1))
    if ms:
        print("\n" + kernel_table(result["rows"]))
    for route, runs in result.get("engine", {}).items():
        for run in runs:
            tok = " / ".join(f"{run['decode'][str(s)]['decode_tok_s']:,.0f}" for s in args.streams.split(","))
            print(f"engine, route {route}: {tok} tok/s at {args.streams} streams")


if __name__ == "__main__":
    main()
