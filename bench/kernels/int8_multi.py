"""int8_gemv.py's multi-row table: each 7B product at M = 1, 2, 4, 8, 16 rows (CUDA).

Kernels per (product, M): "int8 NT" (gemv_int8's default launch for M: NT tokens per program, weights
read ceil(M / NT) times), "float path" (what FusedDecoder ran before for that M: fused_gemv / fused_glu
up to GEMV_MAX_N rows, fused_linear above it), "int8 1 tok/prog" (a baseline gemv_int8.py, one token
per program, loaded from a path) and with sweep the NT_SWEEP launch shapes at NT = M.
"""

from __future__ import annotations

import importlib.util
import re
from functools import partial

import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from gpu_blocks import reference, rel_err
from products import DEV, blocks, copies_for, graph_time

from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_glu, fused_linear
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
from orcd.quant.kernels.int8_launch import i8_launch
from orcd.quant.kernels.xquant import quantize_x

# (name, kernel key, out, in, calls per 7B token: gate/up as one SwiGLU call per layer); Q4_K_M's
# attn_v / ffn_down are Q6_K in 14 of 28 layers
PRODUCTS = [("gate+up 2x18944x3584", "glu", 18944, 3584, 28), ("q/o 3584x3584", Q.Q4_K, 3584, 3584, 56),
            ("k/v 512x3584", Q.Q4_K, 512, 3584, 42), ("v 512x3584", Q.Q6_K, 512, 3584, 14),
            ("down 3584x18944", Q.Q4_K, 3584, 18944, 14), ("down 3584x18944", Q.Q6_K, 3584, 18944, 14),
            ("lm_head 152064x3584", Q.Q6_K, 152064, 3584, 1)]
# (G, BO, warps) tried per NT tokens per program (the M = NT row of the table)
NT_SWEEP = {
    Q.Q4_K: {2: [(64, 4, 4), (16, 8, 4)], 4: [(32, 4, 4), (8, 8, 4)], 8: [(16, 4, 4), (4, 8, 4), (8, 8, 8)],
             16: [(4, 4, 4), (8, 4, 8)]},
    Q.Q6_K: {2: [(8, 8, 4), (4, 4, 4)], 4: [(4, 8, 4), (2, 4, 4)], 8: [(2, 8, 4), (2, 4, 4), (1, 16, 4)],
             16: [(1, 4, 4), (1, 8, 8)]},
    "glu": {2: [(32, 4, 4), (8, 8, 4)], 4: [(16, 4, 4), (4, 8, 4)], 8: [(8, 4, 4), (2, 8, 4), (4, 8, 8)],
            16: [(2, 4, 4), (4, 4, 8)]},
}
REF_ROWS = 256


def _baseline(path: str | None):
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("gemv_int8_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _float_glu(x, g, u, n, k):
    if x.shape[0] <= GEMV_MAX_N:
        return fused_glu(x, g, u, n, k, Q.Q4_K)
    return F.silu(fused_linear(x, g, n, k, Q.Q4_K)) * fused_linear(x, u, n, k, Q.Q4_K)


def _kernels(key, x, xq, xs, n, k, sweep: bool, base) -> dict:
    """label -> f(weights) for one product at M = x.shape[0]; weights: raw, or (gate, up) for "glu"."""
    m = x.shape[0]
    if key == "glu":
        new = lambda w, launch=None: glu_q4k_i8(xq, xs, *w, n, k, launch=launch)  # noqa: E731
        ks = {"int8 NT": new, "float path": lambda w: _float_glu(x, *w, n, k)}
        if base:
            ks["int8 1 tok/prog"] = lambda w: base.glu_q4k_i8(xq, xs, *w, n, k)
    else:
        new = lambda w, launch=None: gemv_i8(xq, xs, w, n, k, key, launch=launch)  # noqa: E731
        ks = {"int8 NT": new, "float path": lambda w: fused_linear(x, w, n, k, key)}
        if base:
            ks["int8 1 tok/prog"] = lambda w: base.gemv_i8(xq, xs, w, n, k, key)
    for cfg in NT_SWEEP[key].get(m, []) if sweep else []:  # NT = M: one program per row block
        ks[f"int8 G{cfg[0]} BO{cfg[1]} w{cfg[2]} NT{m}"] = partial(new, launch=(*cfg, m))
    return ks


def _error(key, x, xq, xs, w, n, k) -> float:
    sub = min(n, REF_ROWS)
    if key == "glu":
        ref = F.silu(reference(x.float(), w[0][:sub], Q.Q4_K, sub, k)) * reference(x.float(), w[1][:sub],
                                                                                   Q.Q4_K, sub, k)
        return rel_err(glu_q4k_i8(xq, xs, *w, n, k, torch.float32)[0][:, :sub], ref)
    return rel_err(gemv_i8(xq, xs, w, n, k, key, dtype=torch.float32)[:, :sub], reference(x.float(), w[:sub],
                                                                                          key, sub, k))


def multi_rows(bw: float, prod: tuple, ms: list[int], sweep: bool, baseline: str | None) -> list[dict]:
    """Rows for one of PRODUCTS at each M."""
    base = _baseline(baseline)
    rows = []
    for name, key, n, k, count in [prod]:
        qt = Q.Q4_K if key == "glu" else key
        nbytes = n * k // 256 * (144 if qt == Q.Q4_K else 210) * (2 if key == "glu" else 1)
        ncp = copies_for(nbytes)
        ws = [(blocks(qt, n, k, 2 * i), blocks(qt, n, k, 2 * i + 1)) if key == "glu"
              else blocks(qt, n, k, i) for i in range(ncp)]
        for m in ms:
            torch.manual_seed(m)
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            xq, xs = quantize_x(x)
            err = _error(key, x, xq, xs, ws[0], n, k)
            for label, f in _kernels(key, x, xq, xs, n, k, sweep, base).items():
                t = graph_time([partial(f, w) for w in ws])
                r = {"name": f"{name} {qt.name}", "m": m, "kernel": label, "bytes": nbytes, "count": count,
                     "us": t * 1e6, "TBps": nbytes / t / 1e12, "floor_us": nbytes / bw * 1e6,
                     "launch": list(i8_launch(key, m)) if label == "int8 NT" else None,
                     "rel_err": err if label == "int8 NT" else None}
                rows.append(r)
                print(f"{r['name']:<26} M{m:<3} {label:<26} {r['us']:8.1f} us {r['TBps']:5.2f} TB/s",
                      flush=True)
        del ws
    return rows


def multi_table(rows: list[dict], res: dict) -> str:
    """Markdown: per product and M, µs of each kernel, the best sweep shape; then per-token sums."""
    by = {}
    for r in rows:
        if "m" in r and "count" in r:
            by.setdefault((r["name"], r["m"]), {})[r["kernel"]] = r
    head = f"Device: {res['device']}, copy {res['copy_TBps']:.2f} TB/s. µs per call (TB/s of weight bytes)."
    out = [head, "", "| product | M | floor µs | int8 NT (default) | int8 1 tok/prog | float path "
           "| best swept | err |", "|---|---|---|---|---|---|---|---|"]
    for (name, m), ks in by.items():
        new, old, flt = ks.get("int8 NT"), ks.get("int8 1 tok/prog"), ks.get("float path")
        swept = [r for lbl, r in ks.items() if lbl.startswith("int8 G")]
        best = min(swept, key=lambda r: r["us"]) if swept else None

        def cell(r):
            return f"{r['us']:.1f} ({r['TBps']:.2f})" if r else "—"
        swept = f"{cell(best)} {best['kernel'][5:]}" if best else "—"
        out.append(f"| {name} | {m} | {new['floor_us']:.1f} | {cell(new)} NT{new['launch'][3]} | {cell(old)} "
                   f"| {cell(flt)} | {swept} | {new['rel_err']:.1e} |")
    labels = ("int8 NT", "int8 now", "int8 best", "int8 1 tok/prog", "float path")
    out += ["", "One 7B step's products (sum of calls per token x µs), ms; int8 NT: the run's launch shapes,",
            "int8 now: today's I8_LAUNCH (where timed), int8 best: the fastest int8 launch of each product:",
            "", "| M | " + " | ".join(labels) + " |",
            "|---|---|---|---|---|---|"]
    for m, sums in sorted(step_sums(rows).items()):
        cells = [f"{sums[lbl]:.2f}" if lbl in sums else "—" for lbl in labels]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _launch_of(r: dict) -> tuple:
    if r["launch"]:
        return tuple(r["launch"])
    g, bo, w, nt = (int(v) for v in re.findall(r"G(\d+) BO(\d+) w(\d+) NT(\d+)", r["kernel"])[0])
    return g, bo, w, nt


def step_sums(rows: list[dict]) -> dict:
    """M -> {"int8 NT", "int8 now", "int8 best", "int8 1 tok/prog", "float path": ms of one 7B token's
    products}; "int8 now": each product at the launch i8_launch gives today (where it was timed), "int8
    best": the fastest int8 launch timed."""
    by: dict = {}
    for r in rows:
        if "count" in r:
            by.setdefault((r["name"], r["m"]), {})[r["kernel"]] = r
    out: dict = {}
    missing = set()
    for (name, m), ks in by.items():
        count = ks["int8 NT"]["count"]
        i8 = [r for lbl, r in ks.items() if lbl.startswith("int8") and "tok/prog" not in lbl]
        key = "glu" if name.startswith("gate") else Q[name.split()[-1]]
        now = [r["us"] for r in i8 if _launch_of(r) == i8_launch(key, m)]
        picks = {lbl: r["us"] for lbl, r in ks.items() if not lbl.startswith("int8 G")}
        picks["int8 best"] = min(r["us"] for r in i8)
        if now:
            picks["int8 now"] = now[0]
        else:
            missing.add(m)
        for lbl, us in picks.items():
            out.setdefault(m, {}).setdefault(lbl, 0.0)
            out[m][lbl] += us * count / 1e3
    for m in missing:
        out[m].pop("int8 now", None)
    return out


def write_plot(rows: list[dict], device: str, path) -> None:
    """PNG: one 7B step's product time (ms) against M for each kernel family."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    sums = step_sums(rows)
    ms = sorted(sums)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for lbl in ("int8 NT", "int8 now", "int8 1 tok/prog", "float path"):
        pts = [(m, sums[m][lbl]) for m in ms if lbl in sums[m]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lbl)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("rows M (decode streams)")
    ax.set_ylabel("ms per step, sum of 7B products")
    ax.set_title(f"int8 GEMVs, Qwen2.5-7B Q4_K_M shapes, {device}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
