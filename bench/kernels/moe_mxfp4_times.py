"""The gpt-oss MoE kernels (orcd/quant/kernels/moe_mxfp4.py) at gpt-oss-20b's shapes (hidden 2880, expert
width 2880, 32 experts, top-4; random MXFP4 blocks), each timed from a CUDA graph of 24 layers' worth of
calls (24 copies of the weights, more than L2), per path (per-pair GEMV, expert-grouped), launch
(BN, KB, num_warps: the default and a few others) and token count.
Effective bandwidth counts the routed experts' weight bytes once per layer.
Usage: python bench/kernels/moe_mxfp4_times.py [--out DIR] [--tokens 1,2,4,8,16,32,64] (writes moe_mxfp4.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from moe_cases import random_mxfp4  # noqa: E402

from orcd.quant.kernels.moe_mxfp4 import GEMV_LAUNCH, GROUPED_LAUNCH, moe_mxfp4  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402

HIDDEN, FFN, EXPERTS, TOP_K, LAYERS = 2880, 2880, 32, 4, 24
# (BN, KB, num_warps) tried per path besides the default; GEMV only up to 8 tokens
SWEEP = {"gemv": [(16, 8, 4), (64, 8, 4), (32, 4, 4), (32, 16, 8)],
         "grouped": [(64, 4, 4), (128, 2, 8), (128, 4, 8), (32, 4, 4)]}


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64")
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
            if path == "gemv" and t > 8:
                continue
            for launch in (default, *SWEEP[path]):
                def step(grouped=path == "grouped", launch=launch, x=x, ids=ids, rw=rw):
                    for wg, wu, wd in layers:
                        h = moe_mxfp4(x, ids, wg, wu, bias, bias, None, TOP_K, grouped=grouped, launch=launch)
                        moe_mxfp4(h, ids, wd, None, bias, None, rw, TOP_K, grouped=grouped, launch=launch)
                row = {"tokens": t, "path": path, "launch": launch, "default": launch == default}
                try:
                    ms = graph_ms(step)
                    row |= {"ms_24_layers": round(ms, 4), "GB_s": round(read / ms / 1e6, 1)}
                except Exception as err:  # noqa: BLE001 - a launch that does not compile is a row too
                    row["error"] = str(err).splitlines()[0][:200]
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = {"device": torch.cuda.get_device_name(), "shape": dict(hidden=HIDDEN, ffn=FFN, experts=EXPERTS,
                                                                   top_k=TOP_K, layers=LAYERS), "rows": rows}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "moe_mxfp4.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
