"""Prototype (issue 16): the Q6_K int8 GEMV over a 16-byte-aligned repacked layout, against gemv_int8.py's
kernel on GGUF's 210-byte blocks, on the 7B's Q6_K shapes.

GGUF's Q6_K block is 210 bytes (ql 128 | qh 64 | scales 16 | d f16), so blocks sit at 2-byte alignment and
gemv_int8.py reads each int32 as two 16-bit loads; Nsight Compute on the H100 (bench/results/
ncu_gemv_int8_7b.md) shows 90 % excess sectors for those loads against 50 % for Q4_K. The split layout keeps
the same bytes: per row, nb blocks of 208 bytes (ql | qh | scales, unchanged) and, in a separate [rows, nb]
fp16 tensor, the d's. Every 208-byte block starts 16-byte aligned, so ql/qh words load as int32 (4 per 16
bytes, vectorizable) instead of halfword pairs. Kernel: gemv_int8's Q6_K pass with those offsets
(`gemv_i8(..., split=True)`; first written here as a standalone prototype, commit 23d3e72).

usage: python bench/kernels/q6k_split.py OUT.json [--model 7b.gguf --launch G,BO,W]   (CUDA; table last)
       TRITON_INTERPRET=1 python bench/kernels/q6k_split.py --check   (CPU: split == gemv_i8, small shapes)
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

SHAPES = [("down 3584x18944", 3584, 18944), ("lm_head 152064x3584", 152064, 3584), ("v 512x3584", 512, 3584)]
LAUNCHES = [(8, 8, 4), (16, 4, 4), (32, 4, 4), (8, 4, 4), (16, 8, 4), (4, 8, 4)]  # (G, BO, warps)


def gemv_split(xq, xs, split_raw, out_features: int, in_features: int, launch=(8, 8, 4),
               residual: torch.Tensor | None = None, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """gemv_i8 on a Q6_K weight in layout.split_q6_k's layout at launch (G, BO, warps). The prototype kernel
    this script first timed (commit 23d3e72) is gemv_int8's SPLIT path now, with the same loads and sums."""
    return gemv_i8(xq, xs, split_raw, out_features, in_features, int(Q.Q6_K), residual=residual, dtype=dtype,
                   launch=launch, split=True)


def check() -> None:
    """CPU (TRITON_INTERPRET=1): the split kernel equals gemv_i8 on the same weights, several launches."""
    for n, k in [(16, 512), (40, 768)]:
        raw = blocks(Q.Q6_K, n, k, 7)
        xq, xs = quantize_x(torch.randn(1, k))
        want = gemv_i8(xq, xs, raw, n, k, int(Q.Q6_K)).float()
        split_raw = split_q6_k(raw)
        for launch in [(2, 4, 4), (4, 8, 4), (1, 2, 2)]:
            got = gemv_split(xq, xs, split_raw, n, k, launch).float()
            err = float((got - want).norm() / want.norm())
            print(f"n {n} k {k} launch {launch}: rel err {err:.2e}")
            assert err < 1e-2, err


def step_rows(path: str, launch: tuple) -> list[dict]:
    """The batch-1 decode graph (FusedDecoder, int8 x, norms fused) on a 7B file, its Q6_K int8 GEMVs
    (down, LM head; v stays in gemv3's launch) on GGUF blocks, then on split copies of the same weights
    (an extra 1.3 GB: the prototype's measurement, not a layout the engine would keep); tok/s at depth 0
    and 4096, alternating, and the two steps' logits against each other."""
    from orcd.cli.bench_session import OrcdSession
    from orcd.quant.linear import QuantLinear
    from orcd.runner import decode_products
    from orcd.runner.decode_graphs import DecodeGraphs
    from orcd.runner.fused_decode import FusedDecoder

    s = OrcdSession(path, num_blocks=320, page=16)  # 5,104 tokens: depth 4096 + 128 steps
    split = {m.raw.data_ptr(): split_q6_k(m.raw) for m in s.model.modules()
             if isinstance(m, QuantLinear) and m.raw is not None and m.qtype == Q.Q6_K}
    gguf_gemv = decode_products.gemv_i8

    def routed(xq, xs, raw, out_f, in_f, qtype, bias=None, residual=None, dtype=torch.bfloat16, launch_=None):
        sp = split.get(raw.data_ptr())
        if sp is None or xq.shape[0] != 1 or bias is not None:
            return gguf_gemv(xq, xs, raw, out_f, in_f, qtype, bias, residual, dtype, launch_)
        return gemv_split(xq, xs, sp, out_f, in_f, launch, residual=residual, dtype=dtype)

    rows, logits = [], {}
    with torch.inference_mode():
        tok = s.prefill(100)
        meta, pos = s._meta(100, 1)
        for key, fn in (("gguf", gguf_gemv), ("split", routed)):
            decode_products.gemv_i8 = fn
            dec = FusedDecoder(s.model, fuse_norm=True, int8_x=True)
            logits[key] = dec(tok, pos, meta, s.kv).float()
            g = DecodeGraphs(s.model, s.kv, s.page, s.width, scratch_block=s.width, buckets=(1,), step_fn=dec)
            g.capture()
            s.graphs[key] = g
        decode_products.gemv_i8 = gguf_gemv
    err = float((logits["split"] - logits["gguf"]).norm() / logits["gguf"].norm())
    rows.append({"name": "step logits, split vs gguf", "rel_err": err, "q6k_weights": len(split)})
    print(f"{len(split)} Q6_K weights; step logits split vs gguf: rel diff {err:.2e}")
    return rows + s.decode_graph_rounds(("gguf", "split"))


def measure(out: str, model: str | None, launch: tuple) -> None:
    bw = copy_bandwidth()
    rows = []
    for name, n, k in SHAPES:
        nbytes = n * k // 256 * 210
        ws = [blocks(Q.Q6_K, n, k, i) for i in range(copies_for(nbytes))]
        sp = [split_q6_k(w) for w in ws]
        xq, xs = quantize_x(torch.randn(1, k, device="cuda", dtype=torch.bfloat16))
        want = gemv_i8(xq, xs, ws[0], n, k, int(Q.Q6_K)).float()
        t = graph_time([partial(gemv_i8, xq, xs, w, n, k, int(Q.Q6_K)) for w in ws])
        rows.append(dict(name=name, kernel="gguf 210 B (gemv_i8 default)", us=t * 1e6,
                         TBps=nbytes / t / 1e12))
        for launch in LAUNCHES:
            got = gemv_split(xq, xs, sp[0], n, k, launch).float()
            err = float((got - want).norm() / want.norm())
            t = graph_time([partial(gemv_split, xq, xs, s, n, k, launch) for s in sp])
            rows.append(dict(name=name, kernel=f"split G{launch[0]} BO{launch[1]} w{launch[2]}", us=t * 1e6,
                             TBps=nbytes / t / 1e12, rel_err_vs_gguf=err))
    steps = step_rows(model, launch) if model else []
    dev = torch.cuda.get_device_name()
    Path(out).write_text(json.dumps({"device": dev, "copy_TBps": bw / 1e12, "rows": rows, "step": steps},
                                    indent=1))
    lines = [f"# Q6_K int8 GEMV, GGUF layout vs split layout ({dev}; copy {bw / 1e12:.2f} TB/s)", "",
             "| product | kernel | µs | TB/s | rel. err vs GGUF kernel |", "|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['kernel']} | {r['us']:.1f} | {r['TBps']:.2f} | "
              f"{r.get('rel_err_vs_gguf', 0):.1e} |" for r in rows]
    lines += ["", f"Batch-1 decode graph, 7B, Q6_K products on the split layout with launch {launch}:", "",
              "| variant | depth | tok/s |", "|---|---|---|"]
    lines += [f"| {r['variant']} | {r['depth']} | {r['tok_s']:.1f} |" for r in steps if "variant" in r]
    lines += [f"step logits split vs gguf: {r['rel_err']:.2e}" for r in steps if "rel_err" in r]
    Path(out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--model", default=None, help="7B Q4_K_M GGUF: also the batch-1 decode graph A/B")
    ap.add_argument("--launch", default="8,8,4", help="(G, BO, warps) of the split kernel in the step")
    a = ap.parse_args()
    check() if a.check else measure(a.out, a.model, tuple(int(v) for v in a.launch.split(",")))
