"""The int8-activation GEMVs (gemv_int8.py) at the 7B shapes on CUDA: M = 1, 2, 4, 8, 16 rows.

usage: python bench/kernels/int8_gemv.py OUT.json [--rows 1,2,4,8,16] [--sweep] [--baseline OLD.py]
       [--m1-sweep] [--model 7B.gguf]

Each product timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py's
method). Per M (multi.py): the int8 kernels at their default launch (NT tokens per program, each weight
read ceil(M / NT) times), the float path FusedDecoder took before for that M (fused_linear / fused_glu:
fp32 GEMVs up to 4 rows, then batched_linear or dequantize + cuBLAS), with --baseline a gemv_int8.py
of one token per program (the earlier kernel file, loaded from that path), with --sweep the launch
shapes of bench/kernels/int8_multi.py's NT_SWEEP; error of the default against float64. Writes
OUT.json and OUT.md. --m1-sweep: the M = 1 launch sweep against the fp32 GEMVs. --model: the batch-1
decode graph (FusedDecoder fuse_norm) with int8_x off and on, and one step's logits against eager.
Also OUT.png: one step's product time against M.
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
sys.path[:0] = [str(ROOT / "bench/peers"), str(ROOT / "tests/gpu")]
from gpu_blocks import reference, rel_err  # noqa: E402
from int8_multi import PRODUCTS, multi_rows, multi_table, write_plot  # noqa: E402
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

GEMV_SWEEP = {Q.Q4_K: [(32, 4, 4), (64, 4, 4), (32, 4, 8), (32, 2, 4), (32, 8, 4)],
              Q.Q6_K: [(16, 4, 4), (8, 4, 4), (32, 4, 4), (4, 8, 4), (8, 8, 4), (16, 2, 4), (4, 4, 2)]}
GLU_SWEEP = [(8, 32, 4), (2, 32, 2), (32, 4, 4), (16, 4, 4), (32, 8, 4), (16, 8, 4)]
REF_ROWS = 512
SHAPES = [("q/o 3584x3584", Q.Q4_K, 3584, 3584), ("k/v 512x3584", Q.Q4_K, 512, 3584),
          ("down 3584x18944", Q.Q4_K, 3584, 18944), ("down 3584x18944", Q.Q6_K, 3584, 18944),
          ("lm_head 152064x3584", Q.Q6_K, 152064, 3584)]


def row(name, kernel, nbytes, t, bw, err=None):
    r = {"name": name, "kernel": kernel, "bytes": nbytes, "us": t * 1e6, "TBps": nbytes / t / 1e12,
         "floor_us": nbytes / bw * 1e6, "rel_err": err}
    print(f"{name:<20} {kernel:<28} {r['us']:8.1f} us {r['TBps']:5.2f} TB/s"
          + (f"  err {err:.2e}" if err is not None else ""), flush=True)
    return r


def gemv_rows(bw: float) -> list[dict]:
    rows = []
    for name, qt, n, k in SHAPES:
        nbytes = n * k // 256 * (144 if qt == Q.Q4_K else 210)
        raws = [blocks(qt, n, k, i) for i in range(copies_for(nbytes))]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        res = torch.zeros(1, n, device="cuda", dtype=torch.bfloat16)
        xq, xs = quantize_x(x)
        sub = min(n, REF_ROWS)
        ref = reference(x.float(), raws[0][:sub], qt, sub, k)
        name = f"{name} {qt.name}"
        rows.append(row(name, "fp32 gemv (today)", nbytes,
                        graph_time([partial(fused_gemv, x, r, n, k, qt, residual=res) for r in raws]), bw,
                        rel_err(fused_gemv(x, raws[0], n, k, qt)[:, :sub], ref)))
        for cfg in GEMV_SWEEP[qt]:
            f = [partial(gemv_i8, xq, xs, r, n, k, qt, residual=res, launch=cfg) for r in raws]
            err = rel_err(gemv_i8(xq, xs, raws[0], n, k, qt, launch=cfg)[:, :sub], ref)
            rows.append(row(name, f"int8 G{cfg[0]} BO{cfg[1]} w{cfg[2]}", nbytes, graph_time(f), bw, err))
        rows.append(row(name, "quantize_x alone", k * 2, graph_time([partial(quantize_x, x)]), bw))
    return rows


def glu_rows(bw: float) -> list[dict]:
    n, k = 18944, 3584
    nbytes = 2 * n * k // 256 * 144  # gate and up
    pairs = [(blocks(Q.Q4_K, n, k, 2 * i), blocks(Q.Q4_K, n, k, 2 * i + 1))
             for i in range(copies_for(nbytes))]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    nw = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5
    norm = (nw, 1e-6)
    name = "gate+up 2x18944x3584"
    rows = [row(name, "fp32 glu+norm (today)", nbytes,
                graph_time([partial(fused_glu, x, g, u, n, k, Q.Q4_K, norm=norm) for g, u in pairs]), bw)]
    rows.append(row(name, "quantize_x+norm alone", k * 2, graph_time([partial(quantize_x, x, norm)]), bw))
    xq, xs = quantize_x(x)
    sub = REF_ROWS  # the float64 reference on the first rows only (CPU time)
    ref = torch.nn.functional.silu(reference(x.float(), pairs[0][0][:sub], Q.Q4_K, sub, k)) * reference(
        x.float(), pairs[0][1][:sub], Q.Q4_K, sub, k)
    for cfg in GLU_SWEEP:
        f = [partial(glu_q4k_i8, xq, xs, g, u, n, k, launch=cfg) for g, u in pairs]
        err = rel_err(glu_q4k_i8(xq, xs, *pairs[0], n, k, torch.float32, launch=cfg)[0][:, :sub], ref)
        label = f"int8 glu+quant G{cfg[0]} BO{cfg[1]} w{cfg[2]}"
        rows.append(row(name, label, nbytes, graph_time(f), bw, err))
    return rows


def step_rows(path: str) -> list[dict]:
    from orcd.cli.bench_session import OrcdSession
    from orcd.runner.decode_graphs import DecodeGraphs
    from orcd.runner.fused_decode import FusedDecoder

    s = OrcdSession(path, num_blocks=320, page=16)  # 5,104 tokens: depth 4096 + 128 steps
    rows = []
    with torch.inference_mode():
        tok = s.prefill(100)
        meta, pos = s._meta(100, 1)
        eager = s.model.compute_logits(s.model(tok, pos, meta, s.kv))
        for flag in (False, True):
            fused = FusedDecoder(s.model, fuse_norm=True, int8_x=flag)(tok, pos, meta, s.kv)
            err = float((fused - eager).norm() / eager.norm())
            same = bool((fused.argmax(-1) == eager.argmax(-1)).all())
            print(f"fused step (int8_x={flag}) vs eager: logits rel diff {err:.4f}, same argmax {same}")
            rows.append({"name": "step logits vs eager", "int8_x": flag, "rel_err": err, "same_argmax": same})
    variants = {"fp": (False, False), "int8 mlp+head": (True, False), "int8 all": (True, True)}
    for key, (mlp, attn) in variants.items():
        dec = FusedDecoder(s.model, fuse_norm=True, int8_x=mlp)
        dec.int8_attn = attn
        g = DecodeGraphs(s.model, s.kv, s.page, s.width, scratch_block=s.width, buckets=(1,), step_fn=dec)
        g.capture()
        s.graphs[key] = g
    return rows + s.decode_graph_rounds(list(variants))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rows", default="1,2,4,8,16", help="M values of the multi-row table ('' for none)")
    ap.add_argument("--sweep", action="store_true", help="launch shapes per NT in the multi-row table")
    ap.add_argument("--baseline", default=None, help="a gemv_int8.py of one token per program")
    ap.add_argument("--m1-sweep", action="store_true", help="the M = 1 sweep against the fp32 GEMVs")
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    res = {"device": torch.cuda.get_device_name(), "copy_TBps": bw / 1e12, "rows": []}
    ms = [int(m) for m in a.rows.split(",") if m]
    steps = [partial(multi_rows, bw, p, ms, a.sweep, a.baseline) for p in PRODUCTS] if ms else []
    steps += [lambda: glu_rows(bw), lambda: gemv_rows(bw)] if a.m1_sweep else []
    steps += [lambda: step_rows(a.model)] if a.model else []
    for step in steps:
        res["rows"] += step()
        Path(a.out).write_text(json.dumps(res, indent=1))
    if ms:
        md = multi_table(res["rows"], res)
        Path(a.out).with_suffix(".md").write_text(md)
        write_plot(res["rows"], res["device"], Path(a.out).with_suffix(".png"))
        print(md, flush=True)


if __name__ == "__main__":
    main()
