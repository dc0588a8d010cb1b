"""The CUDA-C tensor-core products (orcd/quant/kernels/mmq_cuda.py) against the routes they replace for
decode batches, at the 7B's Q4_K and Q6_K shapes, on CUDA; optionally the engine with each routing.

usage: python bench/kernels/mmq_cuda.py OUT.json [--ms 5,8,16,32,64] [--launches 8x1,16x1,...]
                                      [--wide 4x2x264,4x1x264,...] [--tp 2]

Kernels: each product timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/
products.py's method: time = median replay / launches; floor = weight bytes / the measured copy rate),
beside the route it replaces: Q4_K mmq.py's bf16-weight Triton kernel, Q6_K (split layout) batched_linear.
--wide: WIDE launches (warps x 16-row tiles per warp x target blocks: mmq_cuda.wide_launch picks the K
ranges) timed beside the variant whose warps split K; "route" is the launch the engine takes
(default_launch with the output size: WIDE where uses_wide). --tp N: one tensor-parallel rank's slices of
the products instead (shard_products: output rows / N for q, k, v, gate, up and the head, inputs / N for o
and down). Also the first call's seconds (NVRTC + the driver
compiling a new configuration).
Writes OUT.json and prints a table: µs per product and TB/s. The engine with another routing
(mmq_cuda.ROUTED) is measured from two trees, each committed, by bench/peers/orcd_side.py in one call.
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


ROW_PARALLEL = ("o", "down")  # products whose inputs a rank slices (the rest: their output rows)


def shard_products(products: list[tuple], tp: int) -> list[tuple]:
    """One rank's slices of (name, type, N, K, per_token) products at tensor parallelism tp ("q/o" is
    split into its two products: q's rows and o's inputs are sliced)."""
    if tp == 1:
        return products
    out = []
    for name, qt, n, k, per in products:
        for part in (("q", "o") if name.startswith("q/o") else (name.split()[0],)):
            pn, pk = (n, k // tp) if part in ROW_PARALLEL else (n // tp, k)
            out.append((f"{part} {pn}x{pk} (TP {tp})", qt, pn, pk, per // 2 if part in ("q", "o") else per))
    return out


def kernel_rows(ms: list[int], launches: list[tuple[int, int]],
                wide: list[tuple[int, int, int]], tp: int = 1) -> list[dict]:
    from products import P7B, blocks, copies_for, copy_bandwidth, graph_time  # P7B: the 7B's products

    from orcd.quant.kernels.layout import row_bytes, split_q6_k
    from orcd.quant.kernels.mmq_cuda import check_launch, default_launch, wide_launch

    bw = copy_bandwidth()  # bytes read + written per second by a copy: a read-only kernel's ceiling
    rows = []
    for name, qt, n, k, _per_token in shard_products(P7B, tp):
        nbytes = n * row_bytes(qt, k)
        ws = [blocks(qt, n, k, seed=s) for s in range(copies_for(nbytes))]
        ws = [split_q6_k(w) for w in ws] if qt == Q.Q6_K else ws
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cands = {"today": partial(_today, x, n=n, k=k, qt=qt),
                     "route": partial(_cuda, x, n=n, k=k, launch=default_launch(k, m, n), qt=qt)}
            for nw, mt in dict.fromkeys([default_launch(k, m), *launches]):
                try:
                    check_launch(nw, mt, -(-m // 8))
                except ValueError:
                    continue
                cands[f"cuda {nw}x{mt}"] = partial(_cuda, x, n=n, k=k, launch=(nw, mt), qt=qt)
            for nw, mt, target in wide:
                launch = wide_launch(n, k, nw, mt, target)
                cands[f"wide {nw}x{mt}x{launch[2]}"] = partial(_cuda, x, n=n, k=k, launch=launch, qt=qt)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ms", default="5,8,16", help="decode rows")
    ap.add_argument("--launches", default="8x1,16x1,8x2,4x2",
                    help="mmq_cuda (warps x 16-row tiles) launches to time beside its default")
    ap.add_argument("--wide", default="", help="WIDE launches, warps x tiles x target blocks: 4x2x264,...")
    ap.add_argument("--tp", type=int, default=1, help="one tensor-parallel rank's slices of the products")
    args = ap.parse_args()
    launches = [tuple(int(v) for v in s.split("x")) for s in args.launches.split(",") if s]
    wide = [tuple(int(v) for v in s.split("x")) for s in args.wide.split(",") if s]
    rows = kernel_rows([int(v) for v in args.ms.split(",")], launches, wide, args.tp)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print("\n" + kernel_table(rows))


if __name__ == "__main__":
    main()
