"""Whole decode step under kernel-setting variants (PDL mode, launch shapes, split-K, LM-head norm):
used by bench_kernels.py --step / --pdl. Each variant is applied over the code's defaults (DEFAULTS)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def set_pdl(mode: int) -> None:
    """Programmatic dependent launch mode (fused_linear.PDL_MODE; 0 off) for kernels launched from now on."""
    import orcd.quant.kernels.fused_linear as fl

    os.environ["ORCD_PDL"] = "1" if mode else "0"
    fl.PDL_MODE = mode or fl.PDL_MODE
    fl.pdl_enabled.cache_clear()


def apply(v: dict) -> None:
    """Kernel settings of one variant over the code's defaults (DEFAULTS): pdl (fused_linear.PDL_MODE, 0 off),
    launch / glu ({qtype: (G, BO, warps)}), split ({qtype: (G, BO, warps, target programs)}), qkv_g
    ({qtype: G}), head_apart (FusedDecoder's LM-head norm as its own kernel)."""
    import orcd.quant.kernels.fused_linear as fl
    import orcd.quant.kernels.gemv_multi as gm
    import orcd.runner.fused_decode as fd

    set_pdl(v.get("pdl", DEFAULTS["pdl"]))
    for table, key in ((fl.GEMV_LAUNCH, "launch"), (fl.GLU_LAUNCH, "glu"), (fl.SPLIT_LAUNCH, "split"),
                       (gm.QKV_G, "qkv_g")):
        table.clear()
        table.update(DEFAULTS[key] if key not in v else {int(k): x for k, x in v[key].items()})
    fd.HEAD_NORM_APART = v.get("head_apart", DEFAULTS["head_apart"])


def _defaults() -> dict:
    import orcd.quant.kernels.fused_linear as fl
    import orcd.quant.kernels.gemv_multi as gm
    import orcd.runner.fused_decode as fd

    return {"pdl": fl.PDL_MODE, "launch": dict(fl.GEMV_LAUNCH), "glu": dict(fl.GLU_LAUNCH),
            "split": dict(fl.SPLIT_LAUNCH), "qkv_g": dict(gm.QKV_G), "head_apart": fd.HEAD_NORM_APART}


DEFAULTS = _defaults()


def step_rate(rows: list[dict], sess, depth: int, label: str, v: dict, ref: torch.Tensor | None):
    """tok/s of the whole decode step (FusedDecoder fuse_norm, batch-1 CUDA graph, 256 greedy steps) under
    variant v; the same prompt each time (seeded), and one replay's logits (returned, and compared to ref)."""
    apply(v)
    sess.graphs.pop("fused_norm", None)
    tps = []
    for _ in range(2):
        torch.manual_seed(depth)  # same prompt tokens, so the cache (and the logits below) match
        tps.append(sess.decode_graph(depth, 256, "fused_norm"))
    p = torch.tensor([depth], device="cuda")
    logits, _ = sess.graphs["fused_norm"].run(torch.zeros(1, dtype=torch.int64, device="cuda"), p, p,
                                              (p + 1).int(), sess.tables)
    logits = logits.clone()
    diff = float((logits - (logits if ref is None else ref)).abs().max())
    rows.append({"kernel": f"decode step depth {depth} [{label}]", "us": 1e6 / max(tps), "tok/s": max(tps),
                 "max|dlogits|": diff, "variant": v})
    print(f"{rows[-1]['kernel']:<60} {max(tps):7.1f} tok/s  dlogits {diff:.3g}", flush=True)
    return logits


def step_rates(rows: list[dict], variants: dict[str, dict], deep: int = 2) -> None:
    """Whole decode step on a synthesized Qwen2.5-0.5B-shaped Q4_K_M file: every variant at depth 0, then
    the first one and the `deep` fastest at depth 4096."""
    import subprocess

    from orcd.cli.bench_session import OrcdSession

    path = "/tmp/orcd_q4km.gguf"
    if not Path(path).exists():
        subprocess.run([sys.executable, "-m", "orcd", "synth", "--like", "qwen2.5-0.5b", "--quant",
                        "Q4_K_M", path], check=True, capture_output=True)
    sess = OrcdSession(path, num_blocks=300, page=16)
    ref, rates = None, {}
    for label, v in variants.items():
        logits = step_rate(rows, sess, 0, label, v, ref)
        ref = logits if ref is None else ref
        rates[label] = rows[-1]["tok/s"]
    del sess
    best = sorted(rates, key=rates.get, reverse=True)[:deep]
    sess = OrcdSession(path, num_blocks=(4096 + 512) // 16 + 8, page=16)
    ref = None
    for label in [next(iter(variants))] + [b for b in best if b != next(iter(variants))]:
        logits = step_rate(rows, sess, 4096, label, variants[label], ref)
        ref = logits if ref is None else ref
    del sess
    apply({})


STEP_VARIANTS = {  # the first: before this work's kernel settings; the second: the code's defaults
    "no PDL, no split-K, head norm in GEMV": {"pdl": 0, "split": {}, "head_apart": False},
    "defaults": {},
    "Q6_K 4 splits": {"split": {12: (32, 4, 2, 896), 14: (4, 4, 2, 896)}},
    "Q4_K (16,4,2) 5 splits": {"split": {12: (16, 4, 2, 1120), 14: (4, 4, 2, 1120)}},
    "Q4_K 4 warps": {"split": {12: (32, 4, 4, 896), 14: (4, 4, 2, 1120)}},
    "Q5_0 G=8 (o, q, k)": {"launch": {**DEFAULTS["launch"], 6: (8, 4, 2)}},
    "glu (8,4,2)": {"glu": {**DEFAULTS["launch"], 6: (8, 4, 2)}},
    "PDL 4": {"pdl": 4},
}


