"""One token's Q4_K products: the CUDA-C gemv_q4k_i8 (gemv_cuda.py) against the Triton gemv_i8 at the
7B's and the 0.5B's Q4_K shapes, alone, on CUDA.

usage: python bench/kernels/gemv_cuda.py OUT.json [--launches 4x2,8x2,...]

Each product timed as bench/peers/products.py times them: back-to-back launches in one CUDA graph over
>= 200 MB of weight copies (no launch finds its weights in the L2), median replay / launches; x quantized
once (quantize_x), the residual added in place as the decode step's o and down do. Floor = weight bytes /
the measured copy bandwidth. Error: both kernels against float64 x @ W.T of the dequantized weights, and
the CUDA kernel against Triton's. Writes OUT.json and OUT.md (a table per shape: the Triton kernel, the
CUDA kernel at each launch, µs, TB/s, % of the floor).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers"), str(ROOT / "tests/gpu")]
from gpu_blocks import reference, rel_err  # noqa: E402
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.gemv_cuda import DEFAULT_LAUNCH, gemv_q4k_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

# (name, out, in, count per token) of the Q4_K products
SHAPES = [("7B down", 3584, 18944, 14), ("7B q/o", 3584, 3584, 56), ("7B k", 512, 3584, 28),
          ("7B gate (one of two)", 18944, 3584, 56), ("0.5B down", 896, 4864, 12)]
LAUNCHES = [(4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (2, 2), (2, 4), (16, 1)]


def measure(name: str, n: int, k: int, launches: list, bw: float) -> list[dict]:
    wbytes = n * k // 256 * 144
    raws = [blocks(Q.Q4_K, n, k, i) for i in range(copies_for(wbytes))]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize_x(x)
    res = torch.zeros(1, n, device="cuda", dtype=torch.bfloat16)
    ref = reference(x.float(), raws[0], Q.Q4_K, n, k).cuda()
    tri = gemv_i8(xq, xs, raws[0], n, k, 12, dtype=torch.bfloat16)
    base = {"name": name, "out": n, "in": k, "bytes": wbytes, "floor_us": wbytes / bw * 1e6}
    t = graph_time([lambda r=r: gemv_i8(xq, xs, r, n, k, 12, residual=res) for r in raws])
    rows = [{**base, "kernel": "triton gemv_i8", "launch": "default", "us": t * 1e6,
             "rel_err": rel_err(tri, ref), "vs_triton": 0.0}]
    for shape in launches:
        out = gemv_q4k_i8(xq, xs, raws[0], n, k, launch_shape=shape)
        t = graph_time([lambda w=w, s=shape: gemv_q4k_i8(xq, xs, w, n, k, residual=res, launch_shape=s)
                        for w in raws])
        rows.append({**base, "kernel": "cuda gemv_q4k_i8", "launch": "x".join(map(str, shape)), "us": t * 1e6,
                     "rel_err": rel_err(out, ref), "vs_triton": rel_err(out, tri.double())})
    for row in rows:
        row["tb_s"] = wbytes / row["us"] / 1e6
        row["floor_pct"] = 100 * row["floor_us"] / row["us"]
    return rows


def table(rows: list[dict], bw: float) -> str:
    lines = [f"Copy bandwidth {bw / 1e12:.2f} TB/s; default CUDA launch {DEFAULT_LAUNCH}.", "",
             "| product | kernel | launch | µs | TB/s | % of floor | rel err | vs Triton |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} {r['out']}x{r['in']} | {r['kernel']} | {r['launch']} | {r['us']:.1f} | "
                     f"{r['tb_s']:.2f} | {r['floor_pct']:.0f} | {r['rel_err']:.2e} | {r['vs_triton']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--launches", default=",".join(f"{a}x{b}" for a, b in LAUNCHES))
    a = ap.parse_args()
    launches = [tuple(int(v) for v in s.split("x")) for s in a.launches.split(",")]
    bw = copy_bandwidth()
    rows = [r for name, n, k, _ in SHAPES for r in measure(name, n, k, launches, bw)]
    out = Path(a.out)
    meta = {"device": torch.cuda.get_device_name(), "copy_bw": bw}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    md = table(rows, bw)
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
