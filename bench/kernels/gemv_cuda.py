"""One token's Q4_K and split Q6_K products: the CUDA-C GEMVs (gemv_cuda.py) against the Triton gemv_i8
at the 7B's and the 0.5B's shapes, alone, on CUDA.

usage: python bench/kernels/gemv_cuda.py OUT.json [--launches 4x2,8x2,...] [--qkv-only]

Each product timed as bench/peers/products.py times them: back-to-back launches in one CUDA graph over
>= 200 MB of weight copies (no launch finds its weights in the L2), median replay / launches; x quantized
once (quantize_x), the residual added in place as the decode step's o and down do. Floor = weight bytes /
the measured copy bandwidth. Error: both kernels against float64 x @ W.T of the dequantized weights, and
the CUDA kernel against Triton's. Writes OUT.json and OUT.md (a table per shape: the Triton kernel, the
CUDA kernel at each launch, µs, TB/s, % of the floor), then the 7B's q/k/v (with biases) in one launch:
gemv3_i8 against gemv3_cuda_i8, v Q4_K and v Q6_K (the two kinds of the 7B's layers).
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

from orcd.quant.kernels.gemv3_int8 import gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_cuda import WIDE_ROWS, gemv3_cuda_i8, gemv_cuda_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.layout import row_bytes, split_q6_k  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

# (name, type, out, in) of the products (Q6_K in the split layout, as the decode step holds it)
SHAPES = [("7B down", Q.Q4_K, 3584, 18944), ("7B o", Q.Q4_K, 3584, 3584), ("7B k", Q.Q4_K, 512, 3584),
          ("7B gate (one of two)", Q.Q4_K, 18944, 3584), ("0.5B down", Q.Q4_K, 896, 4864),
          ("7B down", Q.Q6_K, 3584, 18944), ("7B v", Q.Q6_K, 512, 3584), ("0.5B down", Q.Q6_K, 896, 4864),
          ("7B head", Q.Q6_K, 152064, 3584)]
LAUNCHES = {Q.Q4_K: [(4, 1), (4, 2), (4, 4), (8, 2), (2, 2), (2, 4)],
            Q.Q6_K: [(4, 1), (8, 1), (2, 1), (4, 2), (2, 2), (16, 1)]}


def measure(name: str, qt: Q, n: int, k: int, launches: list, bw: float) -> list[dict]:
    wbytes = n * row_bytes(qt, k)
    gguf = [blocks(qt, n, k, i) for i in range(copies_for(wbytes))]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize_x(x)
    res = torch.zeros(1, n, device="cuda", dtype=torch.bfloat16)
    ref = reference(x.float(), gguf[0], qt, n, k).cuda()
    split = qt == Q.Q6_K
    raws = [split_q6_k(r) for r in gguf] if split else gguf
    del gguf
    tri = gemv_i8(xq, xs, raws[0], n, k, int(qt), dtype=torch.bfloat16, split=split)
    base = {"name": name, "type": qt.name, "out": n, "in": k, "bytes": wbytes, "floor_us": wbytes / bw * 1e6}
    t = graph_time([lambda r=r: gemv_i8(xq, xs, r, n, k, int(qt), residual=res, split=split) for r in raws])
    rows = [{**base, "kernel": "triton gemv_i8", "launch": "default", "us": t * 1e6,
             "rel_err": rel_err(tri, ref), "vs_triton": 0.0}]
    for shape in launches:
        out = gemv_cuda_i8(xq, xs, raws[0], n, k, int(qt), split=split, launch_shape=shape)
        t = graph_time([lambda w=w, s=shape: gemv_cuda_i8(xq, xs, w, n, k, int(qt), residual=res, split=split,
                                                          launch_shape=s) for w in raws])
        rows.append({**base, "kernel": "cuda gemv_cuda_i8", "launch": "x".join(map(str, shape)),
                     "us": t * 1e6,
                     "rel_err": rel_err(out, ref), "vs_triton": rel_err(out, tri.double())})
    for row in rows:
        row["tb_s"] = wbytes / row["us"] / 1e6
        row["floor_pct"] = 100 * row["floor_us"] / row["us"]
    return rows


def measure_qkv(v_type: Q, bw: float) -> list[dict]:
    """The 7B's q (3584), k, v (512) of K 3584 with biases: Triton gemv3_i8 and CUDA gemv3_cuda_i8."""
    k, outs, types = 3584, (3584, 512, 512), (Q.Q4_K, Q.Q4_K, v_type)
    wbytes = sum(n * row_bytes(qt, k) for n, qt in zip(outs, types, strict=True))
    copies = []
    for c in range(copies_for(wbytes)):
        mats = [blocks(qt, n, k, 10 * c + j) for j, (qt, n) in enumerate(zip(types, outs, strict=True))]
        copies.append([(split_q6_k(m) if qt == Q.Q6_K else m, n, int(qt), torch.randn(n, device="cuda",
                        dtype=torch.bfloat16)) for m, qt, n in zip(mats, types, outs, strict=True)])
    split = tuple(qt == Q.Q6_K for qt in types)
    xq, xs = quantize_x(torch.randn(1, k, device="cuda", dtype=torch.bfloat16))
    tri = gemv3_i8(xq, xs, copies[0], k, torch.bfloat16, split=split)
    cud = gemv3_cuda_i8(xq, xs, copies[0], k, torch.bfloat16, split=split)
    diff = max(rel_err(a, b.double()) for a, b in zip(cud, tri, strict=True))
    base = {"name": "7B q/k/v", "type": f"v {v_type.name}", "out": sum(outs), "in": k, "bytes": wbytes,
            "floor_us": wbytes / bw * 1e6, "rel_err": float("nan")}
    rows = []
    for kernel, fn in [("triton gemv3_i8", gemv3_i8), ("cuda gemv3_cuda_i8", gemv3_cuda_i8)]:
        t = graph_time([lambda w=w, f=fn: f(xq, xs, w, k, torch.bfloat16, split=split) for w in copies])
        rows.append({**base, "kernel": kernel, "launch": "default", "us": t * 1e6,
                     "vs_triton": diff if kernel.startswith("cuda") else 0.0})
    for row in rows:
        row["tb_s"] = wbytes / row["us"] / 1e6
        row["floor_pct"] = 100 * row["floor_us"] / row["us"]
    return rows



def table(rows: list[dict], bw: float) -> str:
    launch = f"default CUDA launch 2x2 from {WIDE_ROWS} rows, else 4x2"
    lines = [f"Copy bandwidth {bw / 1e12:.2f} TB/s; {launch}.", "",
             "| product | kernel | launch | µs | TB/s | % of floor | rel err | vs Triton |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        product = f"{r['name']} {r['type']} {r['out']}x{r['in']}"
        lines.append(f"| {product} | {r['kernel']} | {r['launch']} | {r['us']:.1f} | "
                     f"{r['tb_s']:.2f} | {r['floor_pct']:.0f} | {r['rel_err']:.2e} | {r['vs_triton']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--launches", help="NWxR,... for every type (default: LAUNCHES by type)")
    ap.add_argument("--qkv-only", action="store_true", help="only the q/k/v launches")
    a = ap.parse_args()
    given = [tuple(int(v) for v in s.split("x")) for s in a.launches.split(",")] if a.launches else None
    bw = copy_bandwidth()
    shapes = [] if a.qkv_only else SHAPES
    rows = [r for name, qt, n, k in shapes for r in measure(name, qt, n, k, given or LAUNCHES[qt], bw)]
    rows += measure_qkv(Q.Q4_K, bw) + measure_qkv(Q.Q6_K, bw)
    out = Path(a.out)
    meta = {"device": torch.cuda.get_device_name(), "copy_bw": bw}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    md = table(rows, bw)
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
