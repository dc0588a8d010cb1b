"""The 72B's one-row products as its decode step runs them, alone, against the copy rate (issues 16, 21).

At 1 stream the 72B read its 45.2 GB at 1.66 TB/s on one H200 where the 7B reaches 1.86 and llama.cpp's
layer split 1.98 (docs/performance.md, "Session 23"). Its ffn_down rows (29,568 = 115.5 x 256 inputs) are
not K-quants: Q5_0 in 40 layers and Q8_0 in 40 (llama.cpp's fallbacks), 16.9 GB a token, and the step runs
them on the float GEMV (fused_gemv, bf16 x) with 2-byte aligned blocks. This times every product of one
72B block (and of a tensor-parallel rank's halves, --tp 2) with the kernel the step uses, the down also on
the alternatives (launch sweep; Q8_0 on the int8 GEMV; the split layouts when present), each over >= 200 MB
of weight copies from a CUDA graph (bench/peers/products.py).

--batched 8,16,32,64 times instead the unfused step's products at those batch sizes (5..64 rows): the
Q5_0 / Q8_0 downs as the step runs them (DecodeProducts.down_rows) against fused_linear, dequantize +
cuBLAS, batched_linear, mmq_legacy's launches (the CUDA-C tensor-core kernel for Q5_0 / Q8_0, which
fused_linear now takes) and (<= 8 rows) quantize_x + gemv_legacy_i8; q/k/v as the step runs them
(batched_qkv.qkv_one_launch) against one batched_qkv launch and three fused_linear calls (the CUDA-C
tensor-core kernel for Q4_K).

usage: python bench/kernels/m1_72b.py OUT.json [--tp 1,2] [--rows 1,2,4] [--downs-only] [--batched 8,64]
       [--gpt-oss]   (with --batched: gpt-oss-20b's Q8_0 q, k/v, o as well)
       TRITON_INTERPRET=1 python bench/kernels/m1_72b.py OUT.json --dry   (CPU: small shapes)
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
import products  # noqa: E402
from products import blocks, copies_for, copy_bandwidth, graph_time  # noqa: E402

from orcd.quant.kernels.batched_linear import batched_linear  # noqa: E402
from orcd.quant.kernels.batched_qkv import batched_qkv, qkv_one_launch  # noqa: E402
from orcd.quant.kernels.dequant_kernel import dequantize_raw  # noqa: E402
from orcd.quant.kernels.fused_linear import fused_gemv, fused_linear, launch_gemv  # noqa: E402
from orcd.quant.kernels.gemv3_int8 import gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8  # noqa: E402
from orcd.quant.kernels.gemv_legacy_int8 import LEGACY_I8_LAUNCH, gemv_legacy_i8  # noqa: E402
from orcd.quant.kernels.int8_launch import tokens_per_program  # noqa: E402
from orcd.quant.kernels.layout import row_bytes, split_q6_k  # noqa: E402
from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear  # noqa: E402
from orcd.quant.kernels.q8_int8_gemv import q8_gemv_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.runner.decode_products import DecodeProducts  # noqa: E402

HIDDEN, FFN, KV = 8192, 29568, 1024
FLOAT_SWEEP = [(8, 4, 1), (16, 8, 2)]  # the best two of session 24's first sweep (m1_72b_252b5f3.json)
Q8_I8_SWEEP = [(4, 32, 4), (2, 32, 4)]  # (BO, G, warps): the best two of the same sweep
LEGACY_SWEEP = [(64, 2, 4), (32, 2, 2), (128, 2, 4), (64, 1, 2), (128, 2, 8), (64, 4, 4), (32, 4, 4),
                (16, 8, 4), (64, 2, 4, 2), (32, 2, 2, 2)]  # (G, BO, warps[, NT])
STEP = DecodeProducts(int8_x=True, int8_attn=True)  # the unfused step's choices (down_rows)
BATCH_SWEEP = [(32, 4, 4, 8), (16, 8, 4, 8)]  # (G, BO, warps, NT): session 25's best two at 8 rows
GPT_OSS = False  # --gpt-oss
MMQ_LEGACY_SWEEP = [(8, 1, 2, 0), (8, 1, 4, 0), (8, 1, 8, 0), (16, 1, 4, 0), (4, 2, 4, 4), (4, 2, 8, 4),
                    (8, 1, 4, 4), (4, 1, 4, 8), (8, 2, 4, 2)]  # (NW, MT, U, KS) of mmq_legacy_linear


def product(name: str, kernel: str, qt: Q, n: int, k: int, make, bw: float, glu: bool = False,
            prep=None) -> dict:
    """Time make(w) (w one weight copy, or (gate, up) for glu; prep(w) first if given) over the copies."""
    nbytes = n * row_bytes(qt, k) * (2 if glu else 1)
    ws = []
    for c in range(copies_for(nbytes)):
        w = blocks(qt, n, k, 100 + 2 * c)
        w = prep(w) if prep is not None else w
        ws.append((w, blocks(qt, n, k, 101 + 2 * c)) if glu else w)
    try:
        t = graph_time([partial(make, w) for w in ws])
    except Exception as err:  # noqa: BLE001 - a launch shape that does not compile or fit: recorded
        print(f"{name:<28} {kernel:<26} error {str(err).splitlines()[0][:120]}", flush=True)
        return {"product": name, "kernel": kernel, "error": str(err).splitlines()[0][:200]}
    row = {"product": name, "kernel": kernel, "type": qt.name, "out": n, "in": k, "bytes": nbytes,
           "us": t * 1e6, "floor_us": nbytes / bw * 1e6, "TBps": nbytes / t / 1e12}
    print(f"{name:<28} {kernel:<26} {row['us']:8.1f} us {row['TBps']:5.2f} TB/s "
          f"(floor {row['floor_us']:.1f})", flush=True)
    return row


def block_rows(tp: int, bw: float, downs_only: bool, m: int = 1) -> list[dict]:
    """One block's products at a rank's shapes (q/k/v and gate/up split by rows, o and down by inputs)
    for M rows of x; downs_only: the Q5_0 / Q8_0 downs alone."""
    q, kv, ffn, attn_in = HIDDEN // tp, KV // tp, FFN // tp, HIDDEN // tp
    tag = f"tp{tp} M{m} "
    xq, xs = quantize_x(torch.randn(m, HIDDEN, device=products.DEV, dtype=torch.bfloat16))
    aq, as_ = quantize_x(torch.randn(m, ffn, device=products.DEV, dtype=torch.bfloat16))
    oq, os_ = quantize_x(torch.randn(m, attn_in, device=products.DEV, dtype=torch.bfloat16))
    xb = torch.randn(m, ffn, device=products.DEV, dtype=torch.bfloat16)
    res = torch.zeros(m, HIDDEN, device=products.DEV, dtype=torch.bfloat16)
    rows = [] if downs_only else [
        product(tag + f"q {q}x{HIDDEN}", "gemv_i8", Q.Q4_K, q, HIDDEN,
                lambda w: gemv_i8(xq, xs, w, q, HIDDEN, 12), bw),
        product(tag + f"v {kv}x{HIDDEN} Q6_K split", "gemv_i8 split", Q.Q6_K, kv, HIDDEN,
                lambda w: gemv_i8(xq, xs, w, kv, HIDDEN, 14, split=True), bw, prep=split_q6_k),
        product(tag + f"o {HIDDEN}x{attn_in}", "gemv_i8 +res", Q.Q4_K, HIDDEN, attn_in,
                lambda w: gemv_i8(oq, os_, w, HIDDEN, attn_in, 12, residual=res), bw),
        product(tag + f"gate/up {ffn}x{HIDDEN}", "glu_q4k_i8", Q.Q4_K, ffn, HIDDEN,
                lambda w: glu_q4k_i8(xq, xs, w[0], w[1], ffn, HIDDEN), bw, glu=True),
        product(tag + f"q/k/v {q + 2 * kv}x{HIDDEN}", "gemv3_i8 (Q4_K)", Q.Q4_K, q + 2 * kv, HIDDEN,
                lambda w: gemv3_i8(xq, xs, [(w[:q], q, 12, None), (w[q:q + kv], kv, 12, None),
                                            (w[q + kv:], kv, 12, None)], HIDDEN, torch.bfloat16), bw),
    ]
    for qt in (Q.Q5_0, Q.Q8_0):
        name = tag + f"down {HIDDEN}x{ffn} {qt.name}"
        rows.append(product(name, "gemv_legacy_i8 (default)", qt, HIDDEN, ffn,
                            lambda w, qt=qt: gemv_legacy_i8(aq, as_, w, HIDDEN, ffn, qt, residual=res), bw))
        for launch in LEGACY_SWEEP:
            if launch != LEGACY_I8_LAUNCH[tokens_per_program(m)][qt]:
                kname = "legacy_i8 G{} BO{} w{}".format(*launch)
                kname += f" NT{launch[3]}" if len(launch) > 3 else ""
                rows.append(product(name, kname, qt, HIDDEN, ffn,
                                    lambda w, qt=qt, c=launch: gemv_legacy_i8(aq, as_, w, HIDDEN, ffn, qt,
                                                                              residual=res, launch=c), bw))
        rows.append(product(name, "fused_gemv (before)", qt, HIDDEN, ffn,
                            lambda w, qt=qt: fused_gemv(xb, w, HIDDEN, ffn, int(qt), residual=res), bw))
        y = torch.empty(m, HIDDEN, device=products.DEV, dtype=torch.bfloat16)
        for c in FLOAT_SWEEP:
            rows.append(product(name, "float G{} BO{} w{}".format(*c), qt, HIDDEN, ffn,
                                lambda w, qt=qt, c=c, y=y: launch_gemv(xb, w, y, int(qt), HIDDEN, ffn, *c),
                                bw))
    name = tag + f"down {HIDDEN}x{ffn} Q8_0"
    for launch in Q8_I8_SWEEP:
        rows.append(product(name, f"q8_gemv_i8 BO{launch[0]} G{launch[1]} w{launch[2]}", Q.Q8_0, HIDDEN, ffn,
                            lambda w, c=launch: q8_gemv_i8(aq, as_, [(w, HIDDEN, None)], ffn, torch.bfloat16,
                                                           residual=res, launch=c), bw))
    return rows


def batched_rows(tp: int, bw: float, m: int) -> list[dict]:
    """The unfused step's downs and q/k/v at a rank's shapes for an M-row batch (M > 4)."""
    q, kv, ffn = HIDDEN // tp, KV // tp, FFN // tp
    tag = f"tp{tp} M{m} "
    act = torch.randn(m, ffn, device=products.DEV, dtype=torch.bfloat16)
    h = torch.randn(m, HIDDEN, device=products.DEV, dtype=torch.bfloat16)
    rows = []
    for qt in (Q.Q5_0, Q.Q8_0):
        name = tag + f"down {HIDDEN}x{ffn} {qt.name}"
        rows.append(product(name, "down_rows (the step's)", qt, HIDDEN, ffn,
                            lambda w, qt=qt: STEP.down_rows(SimpleNamespace(down=SimpleNamespace(
                                qtype=qt, raw=w, out_features=HIDDEN, in_features=ffn, bias=None)), act), bw))
        rows.append(product(name, "fused_linear", qt, HIDDEN, ffn,
                            lambda w, qt=qt: fused_linear(act, w, HIDDEN, ffn, int(qt)), bw))
        dense = partial(dequantize_raw, qtype=int(qt), out_features=HIDDEN, in_features=ffn, dtype=act.dtype)
        rows.append(product(name, "dequantize + cuBLAS", qt, HIDDEN, ffn,
                            lambda w, d=dense: act @ d(w).t(), bw))
        rows.append(product(name, "batched_linear", qt, HIDDEN, ffn,
                            lambda w, qt=qt: batched_linear(act, w, HIDDEN, ffn, int(qt)), bw))
        for launch in MMQ_LEGACY_SWEEP:
            legacy = partial(mmq_legacy_linear, out_features=HIDDEN, in_features=ffn, qtype=qt, launch=launch)
            rows.append(product(name, "mmq_legacy NW{} MT{} U{} KS{}".format(*launch), qt, HIDDEN, ffn,
                                lambda w, f=legacy: f(act, w), bw))
        for launch in BATCH_SWEEP if m <= 8 else []:
            kname = "quantize_x + legacy_i8 G{} BO{} w{} NT{}".format(*launch)
            legacy = partial(gemv_legacy_i8, out_features=HIDDEN, in_features=ffn, qtype=qt, launch=launch)
            rows.append(product(name, kname, qt, HIDDEN, ffn, lambda w, f=legacy: f(*quantize_x(act), w), bw))
    if GPT_OSS:
        rows += gpt_oss_rows(m, bw)
    n = q + 2 * kv
    cuts = [(0, q), (q, q + kv), (q + kv, n)]
    name = tag + f"q/k/v {n}x{HIDDEN}"
    rows.append(product(name, "qkv_rows (the step's)", Q.Q4_K, n, HIDDEN,
                        lambda w: qkv_rows_of(h, [(w[a:b], b - a, 12, None) for a, b in cuts]), bw))
    rows.append(product(name, "batched_qkv", Q.Q4_K, n, HIDDEN,
                        lambda w: batched_qkv(h, [(w[a:b], b - a, 12, None) for a, b in cuts], HIDDEN), bw))
    rows.append(product(name, "3 x fused_linear", Q.Q4_K, n, HIDDEN,
                        lambda w: [fused_linear(h, w[a:b], b - a, HIDDEN, 12) for a, b in cuts], bw))
    return rows


def gpt_oss_rows(m: int, bw: float) -> list[dict]:
    """gpt-oss-20b's Q8_0 attention products (q 4096 x 2880, k/v 512 x 2880, o 2880 x 4096) at M rows:
    batched_linear (the route before mmq_legacy) against mmq_legacy's launches."""
    rows = []
    for n, k, what in ((4096, 2880, "q"), (512, 2880, "k/v"), (2880, 4096, "o")):
        xs = torch.randn(m, k, device=products.DEV, dtype=torch.bfloat16)
        name = f"gpt-oss M{m} {what} {n}x{k} Q8_0"
        rows.append(product(name, "fused_linear", Q.Q8_0, n, k, lambda w, xs=xs, n=n, k=k: fused_linear(
            xs, w, n, k, int(Q.Q8_0)), bw))
        rows.append(product(name, "batched_linear", Q.Q8_0, n, k, lambda w, xs=xs, n=n, k=k: batched_linear(
            xs, w, n, k, int(Q.Q8_0)), bw))
        for launch in MMQ_LEGACY_SWEEP:
            rows.append(product(name, "mmq_legacy NW{} MT{} U{} KS{}".format(*launch), Q.Q8_0, n, k,
                                lambda w, xs=xs, n=n, k=k, c=launch: mmq_legacy_linear(xs, w, n, k, Q.Q8_0,
                                                                                      launch=c), bw))
    return rows


def qkv_rows_of(h: torch.Tensor, weights: list) -> list[torch.Tensor]:
    """DecodeProducts.qkv_rows's choice for these three raw Q4_K weights (no bias)."""
    if qkv_one_launch(weights, h.shape[0], HIDDEN):
        return batched_qkv(h, weights, HIDDEN)
    return [fused_linear(h, w, o, HIDDEN, qt) for w, o, qt, _b in weights]


def main() -> None:
    global HIDDEN, FFN, KV, FLOAT_SWEEP, Q8_I8_SWEEP, LEGACY_SWEEP, BATCH_SWEEP, GPT_OSS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tp", default="1,2", help="world sizes whose rank shapes to time")
    ap.add_argument("--dry", action="store_true", help="small shapes, few launches (the CPU path)")
    ap.add_argument("--downs-only", action="store_true", help="only the Q5_0 / Q8_0 downs")
    ap.add_argument("--rows", default="1", help="x rows (M); past 1 the downs only")
    ap.add_argument("--batched", default="", help="batch sizes > 4: the unfused step's downs and q/k/v")
    ap.add_argument("--gpt-oss", action="store_true", help="with --batched: gpt-oss's Q8_0 attention too")
    a = ap.parse_args()
    GPT_OSS = a.gpt_oss
    if a.dry:
        HIDDEN, FFN, KV = 512, 1536, 256
        FLOAT_SWEEP, Q8_I8_SWEEP, LEGACY_SWEEP = FLOAT_SWEEP[:1], Q8_I8_SWEEP[:1], LEGACY_SWEEP[:1]
        BATCH_SWEEP = BATCH_SWEEP[1:2]
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows = []
    for tp in [int(t) for t in a.tp.split(",")]:
        for m in [int(r) for r in a.rows.split(",")] if not a.batched else []:
            rows += block_rows(tp, bw, a.downs_only or m > 1, m)
        for m in [int(r) for r in a.batched.split(",") if r]:
            rows += batched_rows(tp, bw, m)
        dev = torch.cuda.get_device_name() if products.DEV == "cuda" else "cpu"
        Path(a.out).write_text(json.dumps({"device": dev, "copy_TBps": bw / 1e12, "rows": rows}, indent=1))
    print("\n| product | kernel (first: the step's) | µs | TB/s | best | best µs | best TB/s |")
    print("|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["product"] for r in rows):
        ok = [r for r in rows if r["product"] == name and "us" in r]
        if not ok:
            continue
        first, best = ok[0], min(ok, key=lambda r: r["us"])
        print(f"| {name} | {first['kernel']} | {first['us']:.1f} | {first['TBps']:.2f} | {best['kernel']} | "
              f"{best['us']:.1f} | {best['TBps']:.2f} |")


if __name__ == "__main__":
    main()
