"""The batched decode products at the 7B, 0.5B or Gemma 3 270M Q4_K_M shapes, M = 5..64 rows, on CUDA:
mmq.py's int8 tensor-core kernel (and its bf16-weight variant) against today's paths (batched_linear,
dequantize + cuBLAS, and at M <= 8 the one-token-per-program GEMV).

usage: python bench/kernels/mmq.py OUT.json [--shapes 7b|0.5b|gemma] [--ms 8,16,32,64] [--sweep-ms 16,64]
                                   [--jobs 12] [--engine 7B.gguf --streams 16,32,64 --gen 64]

Each product timed alone from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py's
method: time = median replay / launches; floor = weight bytes / measured copy bandwidth). --jobs N first
runs every candidate once in N processes (to compile the Triton kernels in parallel), then times them
one at a time in this process. Writes OUT.json (rows) and OUT.md (the best per product and M).
--sweep-ms: also batched_linear's (SWEEP_BL) and mmq's launch sweeps at these M.
--engine: then the engine's decode tok/s (bench/peers/orcd_side.py's measure) twice, with fused_linear
sending decode batches to mmq as committed (mmq.MMQ_ROUTE, MMQ_LAUNCH) and with that route switched off
(batched_linear / dequantize + cuBLAS, as before mmq). --types Q4_K: only that type's products.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
from products import LAYOUT, blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

import orcd.quant.kernels.fused_linear as fused_mod  # noqa: E402
import orcd.quant.kernels.mmq as mmq_mod  # noqa: E402
from orcd.quant.kernels.batched_fused import batched_fused  # noqa: E402
from orcd.quant.kernels.batched_linear import batched_linear  # noqa: E402
from orcd.quant.kernels.dequant_kernel import dequantize_raw  # noqa: E402
from orcd.quant.kernels.fused_linear import fused_linear, gemv_plan, launch_gemv  # noqa: E402
from orcd.quant.kernels.mmq import mmq_linear  # noqa: E402

# (name, type, out, in) of one 7B layer's products and the LM head
P7B = [("q/o 3584x3584", Q.Q4_K, 3584, 3584), ("k/v 512x3584", Q.Q4_K, 512, 3584),
       ("v 512x3584", Q.Q6_K, 512, 3584), ("gate/up 18944x3584", Q.Q4_K, 18944, 3584),
       ("down 3584x18944", Q.Q4_K, 3584, 18944), ("down 3584x18944", Q.Q6_K, 3584, 18944),
       ("lm_head 152064x3584", Q.Q6_K, 152064, 3584)]
# the 0.5B (synth Q4_K_M: the 896-wide matrices fall back to Q5_0 / Q8_0; ffn_down Q4_K or Q6_K; tied Q8_0
# head) and the Gemma 3 270M (hidden 640, FFN 2048, 4 x 256 q heads, one kv head, 262,144-entry head)
P05 = [("q/o 896x896", Q.Q5_0, 896, 896), ("k 128x896", Q.Q5_0, 128, 896), ("v 128x896", Q.Q8_0, 128, 896),
       ("gate/up 4864x896", Q.Q5_0, 4864, 896), ("down 896x4864", Q.Q4_K, 896, 4864),
       ("down 896x4864", Q.Q6_K, 896, 4864), ("lm_head 151936x896", Q.Q8_0, 151936, 896)]
PGEMMA = [("q 1024x640", Q.Q5_0, 1024, 640), ("v 256x640", Q.Q8_0, 256, 640),
          ("o 640x1024", Q.Q4_K, 640, 1024), ("gate/up 2048x640", Q.Q5_0, 2048, 640),
          ("down 640x2048", Q.Q6_K, 640, 2048),
          ("lm_head 262144x640", Q.Q8_0, 262144, 640)]
SHAPES = {"7b": P7B, "0.5b": P05, "gemma": PGEMMA}
# (BN, warps, stages) of mmq's bf16-w path per type, and of its int8 path
SWEEP = {Q.Q4_K: [(32, 4, 3), (64, 4, 3), (64, 4, 2), (64, 4, 4), (128, 4, 3), (128, 8, 3), (64, 8, 3)],
         Q.Q6_K: [(32, 4, 2), (32, 4, 3), (32, 8, 2), (64, 8, 3), (128, 8, 2), (64, 8, 2)]}
SWEEP_I8 = [(64, 8, 3), (32, 4, 3)]
FUSED: list = []  # --fused: [True]
SWEEP_BL = [(32, 4, 2), (128, 4, 2), (64, 8, 2), (32, 2, 1), (64, 4, 3)]  # batched_linear (BN, warps, stages)


def _cublas(x, r, n, k, qt):
    return torch.matmul(x, dequantize_raw(r, int(qt), n, k, x.dtype).t())


def _gemv(x, r, n, k, qt):
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    launch_gemv(x, r, y, int(qt), n, k, *gemv_plan(int(qt), n, k))
    return y


def _fused(x, r, n, k, qt, mode, bufs={}):  # noqa: B006 (the residual buffers live across calls)
    """batched_fused alone ("") or with its RMSNorm of x ("norm") or residual add ("res")."""
    key = (x.shape[0], n, k, x.device)
    if key not in bufs:
        bufs[key] = (torch.rand(k, device=x.device, dtype=x.dtype),
                     torch.zeros(x.shape[0], n, device=x.device, dtype=x.dtype))
    nw, res = bufs[key]
    return batched_fused(x, r, n, k, qt, norm=(nw, 1e-6) if mode == "norm" else None,
                         residual=res if mode == "res" else None)


def candidates(qt, m: int, sweep: bool, k: int = 256) -> dict:
    c = {"fused_linear (today)": lambda x, r, n, k: fused_linear(x, r, n, k, int(qt)),
         "batched_linear": lambda x, r, n, k: batched_linear(x, r, n, k, qt)}
    if FUSED:  # the norm-fused step's products above GEMV_MAX_N rows
        c |= {f"batched_fused {md}".strip(): partial(_fused, qt=qt, mode=md) for md in ("", "norm", "res")}
    if k % 256 or qt not in mmq_mod.BLOCK_BYTES:  # mmq: K-quants only
        c["dequant+cuBLAS"] = lambda x, r, n, k: _cublas(x, r, n, k, qt)
        for cfg in SWEEP_BL if sweep else []:
            c[f"batched_linear BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_bl_launch, qt=qt, cfg=cfg)
        return c | ({"gemv": partial(_gemv, qt=qt)} if m <= 8 else {})
    c |= {"mmq int8": lambda x, r, n, k: mmq_linear(x, r, n, k, qt),
          "mmq bf16-w": lambda x, r, n, k: mmq_linear(x, r, n, k, qt, float_w=True)}
    if m <= 8:
        c["dequant+cuBLAS"] = lambda x, r, n, k: _cublas(x, r, n, k, qt)
        c["gemv"] = partial(_gemv, qt=qt)
    for cfg in SWEEP_I8 if sweep else []:
        c[f"mmq int8 BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_mmq_launch, qt=qt, cfg=cfg, float_w=False)
    for cfg in SWEEP[qt] if sweep else []:
        c[f"mmq bf16-w BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_mmq_launch, qt=qt, cfg=cfg, float_w=True)
    return c


def _bl_launch(x, r, n, k, qt, cfg):
    return batched_linear(x, r, n, k, qt, launch=cfg)


def _mmq_launch(x, r, n, k, qt, cfg, float_w):
    return mmq_linear(x, r, n, k, qt, launch=cfg, float_w=float_w)


def cases(ms: list[int], sweep_ms: list[int]) -> list[tuple]:
    return [(p, m, name) for p in P7B for m in ms for name in candidates(p[1], m, m in sweep_ms, p[3])]


def warm(ms, sweep_ms, job: int, jobs: int) -> None:
    """Run this job's share of the cases once (Triton compiles them into its on-disk cache)."""
    for i, ((_name, qt, n, k), m, kname) in enumerate(cases(ms, sweep_ms)):
        if i % jobs == job:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            candidates(qt, m, m in sweep_ms, k)[kname](x, blocks(qt, n, k, 0), n, k)
    torch.cuda.synchronize()


def timed(ms, sweep_ms, bw: float, res: dict, out: Path) -> list[dict]:
    rows = res.setdefault("rows", [])
    for name, qt, n, k in P7B:
        bs, ts, _ = LAYOUT[qt]
        wbytes = n * k // bs * ts
        raws = [blocks(qt, n, k, i) for i in range(copies_for(wbytes))]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for kname, f in candidates(qt, m, m in sweep_ms, k).items():
                t = graph_time([partial(f, x, r, n, k) for r in raws])
                rows.append({"name": name, "type": qt.name, "out": n, "in": k, "m": m, "kernel": kname,
                             "bytes": wbytes, "floor_us": wbytes / bw * 1e6, "us": t * 1e6,
                             "TBps": wbytes / t / 1e12})
                print(f"{name:<20}{qt.name:<5}{m:>3} {kname:<28}{t * 1e6:>9.1f} us", flush=True)
        del raws
        out.write_text(json.dumps(res, indent=1))  # after each product: a time limit keeps what finished
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per product and M, the floor, today's path, batched_linear, mmq's two variants at their
    default launch, and the fastest candidate."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["name"], r["type"], r["m"]), {})[r["kernel"]] = r
    out = ["| product | type | M | floor µs | today µs | batched_linear | mmq int8 | mmq bf16-w "
           "| best (TB/s) |", "|---|---|---|---|---|---|---|---|---|"]
    shown = ("fused_linear (today)", "batched_linear", "mmq int8", "mmq bf16-w")
    for (name, qt, m), v in by.items():
        best = min(v.values(), key=lambda r: r["us"])
        cols = [f"{v[k]['us']:.1f}" if k in v else "—" for k in shown]
        out.append(f"| {name} | {qt} | {m} | {best['floor_us']:.1f} | {' | '.join(cols)} | "
                   f"{best['us']:.1f} {best['kernel']} ({best['TBps']:.2f}) |")
    return "\n".join(out)


def engine(res: dict, model: str, streams: list[int], gen: int, out: Path) -> None:
    """Engine decode tok/s with the mmq route (at the sweep's launches) and without it."""
    from orcd_side import measure

    res["engine_launch"] = {Q(qt).name: v for qt, v in mmq_mod.MMQ_LAUNCH.items() if qt in mmq_mod.MMQ_ROUTE}
    routed = fused_mod.mmq_routed
    for label, route in (("mmq", routed), ("without mmq", lambda *a: False)):
        fused_mod.mmq_routed = route
        res.setdefault("engine", {})[label] = measure(model, streams, 128, gen)
        out.write_text(json.dumps(res, indent=1))
    fused_mod.mmq_routed = routed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ms", default="8,16,32,64")
    ap.add_argument("--sweep-ms", default="16,64")
    ap.add_argument("--jobs", type=int, default=0, help="compile first in this many processes")
    ap.add_argument("--warm-only", action="store_true", help="only compile (with --jobs), time nothing")
    ap.add_argument("--engine", help="a GGUF file: the engine A/B after the products")
    ap.add_argument("--streams", default="16,32,64")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--types", default="Q4_K,Q6_K,Q5_0,Q8_0")
    ap.add_argument("--shapes", default="7b", choices=sorted(SHAPES))
    ap.add_argument("--launches", default="", help="sweep only these bf16-w launches, e.g. 256,4,3;128,4,4")
    ap.add_argument("--fused", action="store_true", help="also batched_fused (plain, +RMSNorm, +residual)")
    ap.add_argument("--warm-job", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    ms, sweep_ms = [int(v) for v in a.ms.split(",")], [int(v) for v in a.sweep_ms.split(",") if v]
    P7B[:] = [p for p in SHAPES[a.shapes] if p[1].name in a.types.split(",")]
    FUSED[:] = [True] if a.fused else []
    if a.launches:
        SWEEP_I8.clear()
        for qt in SWEEP:
            SWEEP[qt] = [tuple(int(v) for v in cfg.split(",")) for cfg in a.launches.split(";")]
    if a.warm_job >= 0:
        return warm(ms, sweep_ms, a.warm_job, a.jobs)
    if a.jobs:
        procs = [subprocess.Popen([sys.executable, __file__, a.out, "--ms", a.ms, "--sweep-ms", a.sweep_ms,
                                   "--types", a.types, "--shapes", a.shapes, "--launches", a.launches,
                                   "--jobs", str(a.jobs), *(["--fused"] if a.fused else []),
                                   "--warm-job", str(j)]) for j in range(a.jobs)]
        print("warm-up exit codes", [p.wait() for p in procs], flush=True)
    if a.warm_only:
        return None
    bw = copy_bandwidth()
    res = {"device": torch.cuda.get_device_name(), "copy_TBps": bw / 1e12}
    timed(ms, sweep_ms, bw, res, Path(a.out))
    md = table(res["rows"])
    Path(a.out).with_suffix(".md").write_text(f"{res['device']}, copy {bw / 1e12:.2f} TB/s\n\n{md}\n")
    print(md, flush=True)
    if a.engine:
        engine(res, a.engine, [int(v) for v in a.streams.split(",")], a.gen, Path(a.out))
        for label, r in res["engine"].items():
            tps = ", ".join(f"{c}: {v['decode_tok_s']:,.0f}" for c, v in r["decode"].items())
            print(f"engine {label} (launch {res['engine_launch']}): decode tok/s {tps}", flush=True)


if __name__ == "__main__":
    main()
