"""Per-product kernel times at the Qwen2.5-7B (and 0.5B) Q4_K_M shapes on CUDA: bytes, floor, TB/s.

usage: python bench/peers/products.py OUT.json [--quick]

Each product is timed as it runs in a decode step, alone, from a CUDA graph of back-to-back launches
over enough weight copies (random blocks, finite fp16 scales) that no launch finds its weights in the
50 MB L2; time = median graph replay / launches. Floor = weight bytes / measured copy bandwidth (a
device-to-device copy of 1 GiB, bytes read + written). M = 1: the GEMV orcd runs today (fused_gemv /
fused_glu), and a sweep of its launch shape (G groups per pass, BO rows per program, warps). M = 8, 32,
64: dequantize-to-bf16 + cuBLAS (today's path above 4 rows), invariant_linear, and batched_linear
(raw tiles, tl.dot) over (BN, warps, stages).
"""

from __future__ import annotations

import argparse
import json
import statistics
from functools import partial

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.batched_linear import batched_linear
from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu, fused_linear, launch_gemv
from orcd.quant.kernels.invariant_linear import invariant_linear

# type -> (block size, bytes per block, byte offsets of its fp16 scales)
LAYOUT = {Q.Q8_0: (32, 34, (0,)), Q.Q5_0: (32, 22, (0,)), Q.Q4_K: (256, 144, (0, 2)),
          Q.Q6_K: (256, 210, (208,))}
# (name, type, out, in, count per token) for one 7B token; attn_v / ffn_down are Q6_K in 14 of 28 layers
P7B = [("q/o 3584x3584", Q.Q4_K, 3584, 3584, 56), ("k/v 512x3584", Q.Q4_K, 512, 3584, 42),
       ("v 512x3584", Q.Q6_K, 512, 3584, 14), ("gate/up 18944x3584", Q.Q4_K, 18944, 3584, 56),
       ("down 3584x18944", Q.Q4_K, 3584, 18944, 14), ("down 3584x18944", Q.Q6_K, 3584, 18944, 14),
       ("lm_head 152064x3584", Q.Q6_K, 152064, 3584, 1)]
P05B = [("q/o 896x896", Q.Q5_0, 896, 896, 48), ("k 128x896", Q.Q5_0, 128, 896, 24),
        ("v 128x896", Q.Q8_0, 128, 896, 24), ("gate/up 4864x896", Q.Q5_0, 4864, 896, 48),
        ("down 896x4864", Q.Q4_K, 896, 4864, 12), ("down 896x4864", Q.Q6_K, 896, 4864, 12),
        ("lm_head 151936x896", Q.Q8_0, 151936, 896, 1)]
GEMV_SWEEP = {Q.Q4_K: [(32, 4, 4), (16, 4, 4), (16, 8, 4), (32, 8, 8), (8, 16, 4), (16, 16, 8), (8, 8, 4)],
              Q.Q6_K: [(16, 4, 4), (8, 4, 4), (8, 8, 4), (16, 8, 8), (4, 16, 4), (8, 16, 8), (4, 8, 4)]}
MM_SWEEP = [(32, 4, 2, True), (64, 4, 2, True), (64, 8, 2, True), (128, 8, 3, True), (32, 4, 2, False),
            (64, 8, 2, False)]  # (BN, warps, stages, swap)
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run under TRITON_INTERPRET=1 (--dry)
DRY = [("k 64x512", Q.Q4_K, 64, 512, 1), ("v 32x512", Q.Q6_K, 32, 512, 1),
       ("gate/up 64x64", Q.Q5_0, 64, 64, 1), ("down 16x256", Q.Q4_K, 16, 256, 1),
       ("lm_head 40x64", Q.Q8_0, 40, 64, 1)]


def _today_mm(x, r, n, k, qt):
    return fused_linear(x, r, n, k, int(qt))  # M > 4: dequantize to bf16 + cuBLAS


def _inv_mm(x, r, n, k, qt):
    return invariant_linear(x, r, int(qt), n)


def _batched_mm(x, r, n, k, qt, launch=None, swap=True):
    return batched_linear(x, r, n, k, qt, launch=launch, swap=swap)


def blocks(qt: Q, n: int, k: int, seed: int) -> torch.Tensor:
    """uint8 [n, row_bytes] on the GPU: random quant bits, fp16 scales ~ N(0, 0.02)."""
    bs, ts, offs = LAYOUT[qt]
    g = torch.Generator(device=DEV).manual_seed(seed)
    raw = torch.randint(0, 256, (n, k // bs, ts), dtype=torch.uint8, device=DEV, generator=g)
    for off in offs:
        d = (torch.randn((n, k // bs), device=DEV, generator=g) * 0.02).half()
        raw[:, :, off:off + 2] = d.view(torch.uint8).view(n, k // bs, 2)
    return raw.view(n, -1)


def copies_for(nbytes: int) -> int:
    return max(1, min(16, -(-200_000_000 // nbytes)))  # >= 200 MB in rotation (4x the L2)


def graph_time(fns: list, launches: int = 24, reps: int = 7) -> float:
    """Seconds per call: `launches` calls (cycling over fns) captured in one graph, median of reps."""
    for f in fns:
        f()
    if DEV == "cpu":  # dry run: each function ran once
        return 1e-3
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(launches):
            fns[i % len(fns)]()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / launches)
    return statistics.median(ts)


def copy_bandwidth() -> float:
    """Bytes read + written per second of a 1 GiB device-to-device copy."""
    src = torch.empty(1 << (30 if DEV == "cuda" else 20), dtype=torch.uint8, device=DEV).random_()
    dst = torch.empty_like(src)
    return 2 * src.numel() / graph_time([lambda: dst.copy_(src)], launches=5)


def gemv_rows(prods, bw: float, sweep: bool) -> list[dict]:
    rows = []
    for name, qt, n, k, count in prods:
        nb = LAYOUT[qt]
        wbytes = n * k // nb[0] * nb[1]
        raws = [blocks(qt, n, k, i) for i in range(copies_for(wbytes))]
        x = torch.randn(1, k, device=DEV, dtype=torch.bfloat16)
        res = torch.zeros(1, n, device=DEV, dtype=torch.bfloat16)
        base = {"name": name, "type": qt.name, "out": n, "in": k, "per_token": count, "bytes": wbytes,
                "floor_us": wbytes / bw * 1e6}
        if name.startswith("gate"):  # SwiGLU: gate and up in one kernel, 2x the bytes
            t = graph_time([partial(fused_glu, x, r, r, n, k, qt) for r in raws]) / 2
        elif name.startswith("down"):
            t = graph_time([partial(fused_gemv, x, r, n, k, qt, residual=res) for r in raws])
        else:
            t = graph_time([partial(fused_gemv, x, r, n, k, qt) for r in raws])
        rows.append({**base, "m": 1, "kernel": "orcd gemv (today)", "us": t * 1e6, "TBps": wbytes / t / 1e12})
        if sweep and qt in GEMV_SWEEP:
            y = torch.empty(1, n, device=DEV, dtype=torch.bfloat16)
            for g_, bo, w in GEMV_SWEEP[qt]:
                t = graph_time([partial(launch_gemv, x, r, y, int(qt), n, k, g_, bo, w) for r in raws])
                rows.append({**base, "m": 1, "kernel": f"gemv G{g_} BO{bo} w{w}", "us": t * 1e6,
                             "TBps": wbytes / t / 1e12})
        del raws
    return rows


def batched_rows(prods, bw: float, ms: list[int], sweep_ms: list[int]) -> list[dict]:
    rows = []
    for name, qt, n, k, count in prods:
        nb = LAYOUT[qt]
        wbytes = n * k // nb[0] * nb[1]
        raws = [blocks(qt, n, k, i) for i in range(copies_for(wbytes))]
        base = {"name": name, "type": qt.name, "out": n, "in": k, "per_token": count, "bytes": wbytes,
                "floor_us": wbytes / bw * 1e6}
        for m in ms:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            cands = {"dequant+cuBLAS (today)": _today_mm, "invariant_linear": _inv_mm,
                     "batched_linear": _batched_mm}
            if m in sweep_ms:
                for *cfg, swap in MM_SWEEP:
                    cands[f"batched BN{cfg[0]} w{cfg[1]} s{cfg[2]}{' swap' if swap else ''}"] = \
                        partial(_batched_mm, launch=tuple(cfg), swap=swap)
            for kname, f in cands.items():
                t = graph_time([partial(f, x, r, n, k, qt) for r in raws])
                rows.append({**base, "m": m, "kernel": kname, "us": t * 1e6, "TBps": wbytes / t / 1e12})
        del raws
    return rows


def table(rows: list[dict]) -> str:
    best: dict = {}
    for r in rows:
        key = (r["name"], r["type"], r["m"])
        if "today" in r["kernel"]:
            best.setdefault(key, {})["today"] = r
        if key not in best or r["us"] < best[key].get("best", {"us": 1e9})["us"]:
            best.setdefault(key, {})["best"] = r
    out = [f"{'product':<22}{'type':<6}{'M':>3} {'MB':>7} {'floor':>7} {'today us':>9} {'TB/s':>5}  best"]
    for (name, qt, m), v in best.items():
        t, b = v["today"], v["best"]
        out.append(f"{name:<22}{qt:<6}{m:>3} {t['bytes'] / 1e6:>7.1f} {t['floor_us']:>7.1f} {t['us']:>9.1f} "
                   f"{t['TBps']:>5.2f}  {b['us']:.1f} us {b['TBps']:.2f} TB/s ({b['kernel']})")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="no launch-shape sweeps")
    ap.add_argument("--batched-7b", action="store_true", help="7B only: M = 1 today, batched swept")
    a = ap.parse_args()
    p7, p05 = (P7B, P05B) if DEV == "cuda" else (DRY, DRY[:1])
    bw = copy_bandwidth()
    res = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)",
           "copy_TBps": bw / 1e12}
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    steps = [("m1", lambda: gemv_rows(p7, bw, sweep=not a.quick)), ("m1", lambda: gemv_rows(p05, bw, False)),
             ("batched", lambda: batched_rows(p7, bw, [8, 32, 64], [] if a.quick else [8, 64])),
             ("batched", lambda: batched_rows(p05, bw, [8, 64], []))]
    if a.batched_7b:
        steps = [("m1", lambda: gemv_rows(p7, bw, False)),
                 ("batched", lambda: batched_rows(p7, bw, [8, 64], [8, 64]))]
    for key, step in steps:  # the file is rewritten after each step: a time limit keeps what finished
        res.setdefault(key, []).extend(step())
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    print(table(res["m1"] + res["batched"]), flush=True)


if __name__ == "__main__":
    main()
