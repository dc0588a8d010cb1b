"""A figure of one mmq_cuda session's results: the kernels (bench/kernels/mmq_cuda.py's JSON: µs per product,
the route before against the best CUDA-C launch, at each row count) and the engine (bench/peers/
orcd_side.py's JSONs of two commits: decode tok/s by streams).

usage: python bench/kernels/mmq_cuda_report.py KERNELS.json OUT.png --before A.json[,A2.json]
                                              --after B.json[,...] [--labels before,after]
(several JSONs of one commit: their median)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def engine_rates(paths: str) -> dict[int, float]:
    """streams -> median decode tok/s over the runs."""
    runs = [json.loads(Path(p).read_text())["decode"] for p in paths.split(",")]
    streams = sorted({int(s) for run in runs for s in run})
    return {s: statistics.median(run[str(s)]["decode_tok_s"] for run in runs if str(s) in run)
            for s in streams}


def kernel_pairs(path: Path) -> list[tuple[str, float, float]]:
    """(product at M rows, µs of the route before, µs of the best CUDA-C launch)."""
    rows = json.loads(path.read_text())["rows"]
    out = []
    for key in dict.fromkeys((r["product"], r["m"]) for r in rows):
        sel = [r for r in rows if (r["product"], r["m"]) == key]
        before = next(r["us"] for r in sel if r["kernel"] == "today")
        best = min(r["us"] for r in sel if r["kernel"] != "today")
        out.append((f"{key[0].split()[0]} {key[0].split()[-1]} M{key[1]}", before, best))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--labels", default="before,after")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = args.labels.split(",")
    pairs = kernel_pairs(args.kernels)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
    xs = range(len(pairs))
    ax1.bar([x - 0.2 for x in xs], [p[1] for p in pairs], 0.4, label="route before")
    ax1.bar([x + 0.2 for x in xs], [p[2] for p in pairs], 0.4, label="mmq_cuda (best launch)")
    ax1.set_xticks(list(xs), [p[0] for p in pairs], rotation=70, fontsize=7)
    ax1.set_yscale("log")
    ax1.set_ylabel("µs per product (CUDA graph)")
    ax1.legend()
    for label, paths in zip(labels, (args.before, args.after), strict=True):
        rates = engine_rates(paths)
        ax2.plot(list(rates), list(rates.values()), marker="o", label=label)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("streams")
    ax2.set_ylabel("decode tok/s")
    ax2.legend()
    fig.suptitle("7B Q4_K_M synth, H100: kernels and engine")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
