"""The gpt-oss MoE kernels (orcd/quant/kernels/moe_gemv.py, moe_mxfp4.py) at gpt-oss-20b's shapes (hidden
2880, expert width 2880, 32 experts, top-4; random MXFP4 blocks), each timed from a CUDA graph of 24
layers' worth of calls (24 copies of the weights, more than L2); gate+up and down timed apart (each its own
graph), per path (GEMV: gate+up per pair, down with the k-slot sum per token, as MoE.forward_fused runs
it; expert-grouped: both per pair, the sum not counted), launch (BN, KB, num_warps: the default and a
few others) and token count. Effective bandwidth counts the routed experts' weight bytes once per layer.
Usage: python bench/kernels/moe_mxfp4_times.py [--out DIR] [--tokens 1,2,4,8,16,32,64] [--gemv-max 8]
[--no-sweep] (writes moe_mxfp4.json; prints a table of the best launch per path and token count last)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from moe_cases import random_mxfp4  # noqa: E402

from orcd.quant.kernels.moe_gemv import GEMV_LAUNCH, moe_gemv  # noqa: E402
from orcd.quant.kernels.moe_mxfp4 import GROUPED_LAUNCH, moe_mxfp4  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402

HIDDEN, FFN, EXPERTS, TOP_K, LAYERS = 2880, 2880, 32, 4, 24
# (BN, KB, num_warps) tried per path besides the default; GEMV only up to 8 tokens
# (a tile should hold >= 32 * num_warps (row, block) pairs: BN * KB >= 32 * warps, else threads duplicate)
SWEEP = {"gemv": [(32, 8, 4), (8, 8, 2), (8, 16, 4), (16, 16, 8)],
         "grouped": [(64, 4, 4), (32, 8, 4)]}


def graph_ms(fn, reps: int = 10) -> float:
    """fn() captured once in a CUDA graph; median ms per replay."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def make_steps(grouped: bool, launch, layers, x, ids, rw, bias):
    """-> (glu, down): fns running one token batch through 24 layers' gate+up kernel, or down kernel."""
    h = torch.randn(ids.numel(), FFN, device=x.device, dtype=x.dtype) * 0.1

    def glu():
        for wg, wu, _ in layers:
            if grouped:
                moe_mxfp4(x, ids, wg, wu, bias, bias, None, TOP_K, grouped=True, launch=launch)
            else:
                moe_gemv(x, ids, wg, wu, bias, bias, None, TOP_K, launch=launch)

    def down():
        for _, _, wd in layers:
            if grouped:
                moe_mxfp4(h, ids, wd, None, bias, None, rw, TOP_K, grouped=True, launch=launch)
            else:
                moe_gemv(h, ids, wd, None, bias, None, rw, TOP_K, slots=TOP_K, launch=launch)
    return glu, down


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64")
    ap.add_argument("--gemv-max", type=int, default=8, help="largest token count timed on the GEMV path")
    ap.add_argument("--no-sweep", action="store_true", help="the default launches only")
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    dev = "cuda"
    raw = [random_mxfp4(EXPERTS, n, k, gen) for n, k in ((FFN, HIDDEN), (FFN, HIDDEN), (HIDDEN, FFN))]
    expert_bytes = sum(w[0].nbytes for w in raw)  # w[0]: expert 0 of gate, up, down
    layers = [tuple(split_blocks_(w.to(dev)) for w in raw) for _ in range(LAYERS)]  # 24 copies
    bias = torch.zeros(EXPERTS, FFN, device=dev, dtype=torch.bfloat16)
    rows = []
    for t in [int(x) for x in a.tokens.split(",")]:
        x = torch.randn(t, HIDDEN, device=dev, dtype=torch.bfloat16)
        ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(t)]).view(-1).to(dev)
        rw = torch.full((t * TOP_K,), 0.25, device=dev)
        read = ids.unique().numel() * expert_bytes * LAYERS
        for path, default in (("gemv", GEMV_LAUNCH), ("grouped", GROUPED_LAUNCH)):
            if path == "gemv" and t > a.gemv_max:
                continue
            for launch in (default, *([] if a.no_sweep else SWEEP[path])):
                glu, down = make_steps(path == "grouped", launch, layers, x, ids, rw, bias)
                row = {"tokens": t, "path": path, "launch": launch, "default": launch == default}
                try:
                    ms_glu, ms_down = graph_ms(glu), graph_ms(down)
                    ms = ms_glu + ms_down
                    row |= {"ms_24_layers": round(ms, 4), "ms_glu": round(ms_glu, 4),
                            "ms_down": round(ms_down, 4), "GB_s": round(read / ms / 1e6, 1)}
                except Exception as err:  # noqa: BLE001 - a launch that does not compile is a row too
                    row["error"] = str(err).splitlines()[0][:200]
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = {"device": torch.cuda.get_device_name(), "shape": dict(hidden=HIDDEN, ffn=FFN, experts=EXPERTS,
                                                                   top_k=TOP_K, layers=LAYERS), "rows": rows}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "moe_mxfp4.json").write_text(json.dumps(out, indent=1))
    print("tokens path     default ms (glu+down)  best glu launch / ms  best down launch / ms")
    for t in sorted({r["tokens"] for r in rows}):
        for path in ("gemv", "grouped"):
            ok = [r for r in rows if r["tokens"] == t and r["path"] == path and "ms_glu" in r]
            if ok:
                d = next((r for r in ok if r["default"]), ok[0])
                g, dn = min(ok, key=lambda r: r["ms_glu"]), min(ok, key=lambda r: r["ms_down"])
                print(f"{t:>6} {path:8} {d['ms_24_layers']:8.3f} ({d['ms_glu']:.3f}+{d['ms_down']:.3f})  "
                      f"{g['launch']} {g['ms_glu']:.3f}  {dn['launch']} {dn['ms_down']:.3f}")


if __name__ == "__main__":
    main()
