"""The 7B batched decode products, before and after q6k_mmq.py (Q6_K) and mmq.py's magic-number Q4_K path,
one process, each product alone on CUDA; and at 2..4 rows the int8 GEMVs the engine runs there.

usage: python bench/kernels/mmq_q6k.py OUT.json [--ms 3,4,8,16,32,64] [--sweep-ms 16,64] [--jobs 12]
                                       [--engine 7B.gguf --streams 1,8,32,64]

Each candidate timed from a CUDA graph over >= 200 MB of weight copies (bench/peers/products.py: time =
median replay / launches; floor = weight bytes / measured copy bandwidth). --jobs N compiles every
candidate first in N processes. Writes OUT.json (rows) and OUT.md (per product and M: floor, before,
after, the best candidate). --engine: the engine's decode tok/s (orcd_side.measure) with fused_linear's
routes as committed ("after") and with q6k_mmq and MMQ_MAGIC switched off ("before"), same process.
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
from products import DEV, LAYOUT, blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

import orcd.quant.kernels.fused_linear as fused_mod  # noqa: E402
from orcd.quant.kernels.batched_linear import batched_linear  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.mmq import mmq_linear  # noqa: E402
from orcd.quant.kernels.q6k_mmq import q6k_linear  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

# (name, type, out, in, count per 7B token)
P7B = [("gate/up 18944x3584", Q.Q4_K, 18944, 3584, 56), ("down 3584x18944", Q.Q4_K, 3584, 18944, 14),
       ("q/o 3584x3584", Q.Q4_K, 3584, 3584, 28), ("down 3584x18944", Q.Q6_K, 3584, 18944, 14),
       ("lm_head 152064x3584", Q.Q6_K, 152064, 3584, 1)]
SWEEP = {Q.Q4_K: [(64, 4, 3), (128, 8, 3), (128, 4, 4), (256, 8, 3), (64, 4, 4)],
         Q.Q6_K: [(32, 4, 3), (64, 4, 2), (64, 8, 3), (128, 8, 3), (128, 4, 3), (32, 2, 3)]}
SWEEP_SB = [(128, 8, 2), (64, 4, 2), (128, 4, 2)]  # mmq magic, one super-block per loop step
BEFORE = {Q.Q4_K: "mmq bf16-w", Q.Q6_K: "batched_linear"}
AFTER = {Q.Q4_K: "mmq magic", Q.Q6_K: "q6k"}


def _int8(x, r, n, k, qt):
    xq, xs = quantize_x(x)
    return gemv_i8(xq, xs, r, n, k, int(qt), dtype=x.dtype)


def candidates(qt, m: int, sweep: bool) -> dict:
    c = {}
    if m <= 4:
        c["int8 gemv"] = partial(_int8, qt=qt)
    if qt == Q.Q4_K:
        c["mmq bf16-w"] = lambda x, r, n, k: mmq_linear(x, r, n, k, qt, float_w=True)
        c["mmq magic"] = lambda x, r, n, k: mmq_linear(x, r, n, k, qt, float_w=True, magic=True)
        c["mmq magic sb"] = partial(_mmq, qt=qt, cfg=None, whole=True)
        for cfg in SWEEP[qt] if sweep else []:
            c[f"mmq magic BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_mmq, qt=qt, cfg=cfg)
        for cfg in SWEEP_SB if sweep else []:
            c[f"mmq magic sb BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_mmq, qt=qt, cfg=cfg, whole=True)
        return c
    c["batched_linear"] = lambda x, r, n, k: batched_linear(x, r, n, k, qt)
    c["q6k"] = lambda x, r, n, k: q6k_linear(x, r, n, k)
    c["q6k convert"] = lambda x, r, n, k: q6k_linear(x, r, n, k, magic=False)
    for cfg in SWEEP[qt] if sweep else []:
        c[f"q6k BN{cfg[0]} w{cfg[1]} s{cfg[2]}"] = partial(_q6k, cfg=cfg)
    return c


def _mmq(x, r, n, k, qt, cfg, whole=False):
    return mmq_linear(x, r, n, k, qt, launch=cfg, float_w=True, magic=True, whole=whole)


def _q6k(x, r, n, k, cfg):
    return q6k_linear(x, r, n, k, launch=cfg)


def cases(ms, sweep_ms) -> list[tuple]:
    return [(p, m, name) for p in P7B for m in ms for name in candidates(p[1], m, m in sweep_ms)]


def warm(ms, sweep_ms, job: int, jobs: int) -> None:
    for i, ((_n, qt, n, k, _c), m, kname) in enumerate(cases(ms, sweep_ms)):
        if i % jobs == job:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float16)
            try:
                candidates(qt, m, m in sweep_ms)[kname](x, blocks(qt, n, k, 0), n, k)
            except Exception as e:  # noqa: BLE001 (a launch that does not compile is reported, not fatal)
                print(f"warm {kname} M={m}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    torch.cuda.synchronize()


def timed(ms, sweep_ms, bw: float, res: dict, out: Path) -> None:
    rows = res.setdefault("rows", [])
    for name, qt, n, k, count in P7B:
        bs, ts, _ = LAYOUT[qt]
        wbytes = n * k // bs * ts
        raws = [blocks(qt, n, k, i) for i in range(copies_for(wbytes))]
        for m in ms:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float16)
            for kname, f in candidates(qt, m, m in sweep_ms).items():
                try:
                    t = graph_time([partial(f, x, r, n, k) for r in raws])
                except Exception as e:  # noqa: BLE001
                    print(f"{name} {kname} M={m}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                rows.append({"name": name, "type": qt.name, "out": n, "in": k, "count": count, "m": m,
                             "kernel": kname, "bytes": wbytes, "floor_us": wbytes / bw * 1e6, "us": t * 1e6,
                             "TBps": wbytes / t / 1e12})
                print(f"{name:<20}{qt.name:<5}{m:>3} {kname:<26}{t * 1e6:>9.1f} us", flush=True)
        del raws
        out.write_text(json.dumps(res, indent=1))


def table(rows: list[dict]) -> str:
    by: dict = {}
    for r in rows:
        by.setdefault((r["name"], r["type"], r["m"]), {})[r["kernel"]] = r
    out = ["| product | type | M | floor µs | int8 gemv | before | after | best (TB/s) |",
           "|---|---|---|---|---|---|---|---|"]
    for (name, qt, m), v in by.items():
        best = min(v.values(), key=lambda r: r["us"])
        cols = [f"{v[k]['us']:.1f}" if k in v else "—" for k in ("int8 gemv", BEFORE[Q[qt]], AFTER[Q[qt]])]
        out.append(f"| {name} | {qt} | {m} | {best['floor_us']:.1f} | {' | '.join(cols)} | "
                   f"{best['us']:.1f} {best['kernel']} ({best['TBps']:.2f}) |")
    return "\n".join(out)


def engine(res: dict, model: str, streams: list[int], out: Path) -> None:
    """Engine decode tok/s before (no q6k route, no magic Q4_K) and after (as committed), one process."""
    from orcd_side import measure

    routed, magic = fused_mod.q6k_routed, fused_mod.MMQ_MAGIC
    for label in ("before", "after"):
        fused_mod.q6k_routed = routed if label == "after" else (lambda *a: False)
        fused_mod.MMQ_MAGIC = magic if label == "after" else frozenset()
        res.setdefault("engine", {})[label] = measure(model, streams, 128, 128)
        out.write_text(json.dumps(res, indent=1))
        torch.cuda.empty_cache()
    fused_mod.q6k_routed, fused_mod.MMQ_MAGIC = routed, magic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ms", default="3,4,8,16,32,64")
    ap.add_argument("--sweep-ms", default="16,64")
    ap.add_argument("--jobs", type=int, default=0, help="compile first in this many processes")
    ap.add_argument("--engine", help="a GGUF file: the engine before/after after the products")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--no-products", action="store_true", help="only the --engine before/after")
    ap.add_argument("--warm-job", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    ms, sweep_ms = [int(v) for v in a.ms.split(",") if v], [int(v) for v in a.sweep_ms.split(",") if v]
    if a.warm_job >= 0:
        return warm(ms, sweep_ms, a.warm_job, a.jobs)
    if a.no_products:
        ms = []
    if a.jobs and ms:
        procs = [subprocess.Popen([sys.executable, __file__, a.out, "--ms", a.ms, "--sweep-ms", a.sweep_ms,
                                   "--jobs", str(a.jobs), "--warm-job", str(j)]) for j in range(a.jobs)]
        print("warm-up exit codes", [p.wait() for p in procs], flush=True)
    bw = copy_bandwidth()
    res = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "copy_TBps": bw / 1e12}
    timed(ms, sweep_ms, bw, res, Path(a.out))
    if ms:
        md = table(res["rows"])
        Path(a.out).with_suffix(".md").write_text(f"{res['device']}, copy {bw / 1e12:.2f} TB/s\n\n{md}\n")
        print(md, flush=True)
    if a.engine:
        engine(res, a.engine, [int(v) for v in a.streams.split(",")], Path(a.out))
        for label, r in res["engine"].items():
            tps = ", ".join(f"{c}: {v['decode_tok_s']:,.0f}" for c, v in r["decode"].items())
            print(f"engine {label}: decode tok/s {tps}", flush=True)


if __name__ == "__main__":
    main()
