"""Where a WIDE CUDA-C product's time goes at 32-64 rows: the kernel timed whole and with one part taken
out at a time (the source edited as text before NVRTC compiles it; results are wrong, only times count).

usage: python bench/kernels/mmq_cuda_ablate.py OUT.json [--ms 64] [--launches 4x2x264,4x1x264,8x1x264]

Parts (each edit replaces one line of cuda/*.cu or common.cuh; a missing line fails loudly):
  nomma    the mma.sync calls become one float add of the fragments' bits (the tensor cores idle)
  noscale  q4k_scale (sub-block scales: byte picks, int-to-float, two packs) becomes two cheap ops
  nodeq    dequant_pair (two FMA2) becomes one LOP3 (the nibbles go to the mma as they are)
  l2w      every block reads the weights of the first 128 rows: from L2, not DRAM
Each row: µs (median replay of a CUDA graph over >= 200 MB of weight copies) and its share of the whole.
The products: the 7B's Q4_K gate/up (18944 x 3584) and down (3584 x 18944) at the given rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]

MMA = "mma_16(acc + (m * TT + tt) * 4, a0, a1, a2, a3, b0, b1);"
NO_MMA = "acc[(m * TT + tt) * 4] += __uint_as_float(((a0 ^ a1 ^ a2) ^ (a3 ^ b0 ^ b1)) & 0x3F7FFFFFu);"
SCALE = "q4k_scale(hd[m][r], j, dsc, dmn);"
NO_SCALE = "dsc = __uint_as_float((hd[m][r].y >> j) & 0x3F7FFFFFu); dmn = __uint_as_float(hd[m][r].x);"
DEQ_END = "0x80008000u));\n  return r;\n}"  # the end of dequant_pair; the macro after it replaces its calls
NO_DEQ = DEQ_END + "\n#define dequant_pair(p, s, m) ((((p) & 0x000F000Fu) | MAGIC) ^ (s) ^ (m))"
EDITS = {
    "nomma": [(MMA, NO_MMA)],
    "noscale": [(SCALE, NO_SCALE)],
    "nodeq": [(DEQ_END, NO_DEQ)],
    "l2w": [("w + row * row_bytes + sb * 144;", "w + (row & 127) * row_bytes + sb * 144;")],
}
PRODUCTS = [("gate/up 18944x3584", 18944, 3584), ("down 3584x18944", 3584, 18944)]


def edited(source: str, parts: list[str]) -> str:
    for part in parts:
        for old, new in EDITS[part]:
            if old not in source:
                raise ValueError(f"{part}: {old!r} is not in the source")
            source = source.replace(old, new)
    return source


def launcher(n: int, k: int, m: int, launch: tuple[int, int, int], parts: list[str]):
    """f(raw) -> y: the WIDE Q4_K kernel with `parts` taken out, launched as mmq_cuda_linear does."""
    from orcd.quant.kernels.mmq_cuda import _k_ranges, kernel_source, wide_smem
    from orcd.quant.kernels.split_k import partials, reduce_partials

    nw, mt, ks = launch
    src = edited(kernel_source("mmq_q4k_w16", nw, mt, -(-m // 8), 0, False, True), parts)
    kern = torch.cuda._compile_kernel(src, "mmq_q4k_w16")
    smem = wide_smem(-(-m // 8))
    kern.set_shared_memory_config(smem)
    nb = k // 256
    span, ks = _k_ranges(nb, ks)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    ws = partials(ks, y)
    grid = (-(-n // (16 * mt * nw)), ks, 1)

    def f(raw):
        kern(grid=grid, block=(32 * nw, 1, 1), args=[raw, x, y, y if ws is None else ws, m, n, nb, span],
             shared_mem=smem)
        reduce_partials(ws, None, y)
    return f


def main() -> None:
    from products import blocks, copies_for, graph_time

    from orcd.quant.kernels.layout import row_bytes
    from orcd.quant.kernels.mmq_cuda import wide_launch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ms", default="64")
    ap.add_argument("--launches", default="4x2x264,4x2x528,4x1x264,8x1x264,8x1x528,2x2x264,8x2x264")
    ap.add_argument("--parts", default="nomma,noscale,nodeq,l2w,nomma+l2w,noscale+nodeq,"
                                       "noscale+nodeq+l2w,nomma+noscale+nodeq")
    a = ap.parse_args()
    variants = [[]] + [v.split("+") for v in a.parts.split(",") if v]
    rows = []
    for name, n, k in PRODUCTS:
        nbytes = n * row_bytes(Q.Q4_K, k)
        ws = [blocks(Q.Q4_K, n, k, seed=s) for s in range(copies_for(nbytes))]
        for m in (int(v) for v in a.ms.split(",")):
            for spec in a.launches.split(","):
                nw, mt, target = (int(v) for v in spec.split("x"))
                launch = wide_launch(n, k, nw, mt, target)
                whole = None
                for parts in variants:
                    f = launcher(n, k, m, launch, parts)
                    us = graph_time([lambda r=r, f=f: f(r) for r in ws]) * 1e6
                    whole = whole or us
                    row = {"product": name, "m": m, "launch": list(launch), "parts": parts, "us": us,
                           "of_whole": us / whole}
                    rows.append(row)
                    print(f"{name:20s} M={m:3d} {nw}x{mt}x{launch[2]:<3d} {'+'.join(parts) or 'whole':22s} "
                          f"{us:7.1f} us {us / whole:5.2f}", flush=True)
                a.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
