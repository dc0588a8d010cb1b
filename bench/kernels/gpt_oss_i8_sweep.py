"""gpt-oss-20b's decode GEMVs per launch shape, each timed from a CUDA graph of 24 layers' worth of calls
(24 copies of the weights, more than L2). The int8-activation MXFP4 MoE GEMV (moe_mxfp4_int8.py, launch
(BN, KB, num_warps); hidden 2880, expert width 2880, 32 experts, top-4), as GptOssDecoder runs it:
  glu   gate + up with the clamped SwiGLU, bf16 out (then quantize_x: not counted);
  gluq  the same with the output quantized in the epilogue (quant_out; BN a multiple of 32);
  down  the k slots summed per token, routed weights, added into the residual.
The Q8_0 attention GEMVs with int8 x (q8_int8_gemv.py, launch (BO, G, num_warps); up to 4 tokens):
  qkv   q, k, v (4096, 512, 512 x 2880) in one launch;  o   2880 x 4096 added into the residual.
The LM head, Q8_0 201,088 x 2880, one copy (616 MB), fused_linear's GEMV (launch (G, BO, num_warps)).
Floor: the weight bytes read (MoE: each distinct routed expert once per layer) over the time: GB/s.

usage: python bench/kernels/gpt_oss_i8_sweep.py OUT.json [--tokens 1,8] [--quick] [--warm I/N]
Prints the default and the best launch per (path, tokens) last (µs a layer; the head: µs a call).
--warm I/N: compile every N-th launch from the I-th (one call each, nothing timed or written), so that N
processes fill Triton's cache in parallel before the timed run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks  # noqa: E402
from moe_cases import random_mxfp4  # noqa: E402
from moe_mxfp4_times import graph_ms  # noqa: E402 - this folder: the script's own

from orcd.quant.kernels.fused_linear import launch_gemv  # noqa: E402
from orcd.quant.kernels.moe_mxfp4_int8 import (  # noqa: E402
    I8_DOWN_LAUNCH,
    I8_GLU_QUANT_LAUNCH,
    I8_MOE_LAUNCH,
    moe_gemv_i8,
)
from orcd.quant.kernels.q8_int8_gemv import Q8_I8_LAUNCH, q8_gemv_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402
from orcd.runner.fused_gpt_oss import HEAD_LAUNCH_Q8_0  # noqa: E402

HIDDEN, FFN, EXPERTS, TOP_K, LAYERS = 2880, 2880, 32, 4, 24
Q_OUT, KV_OUT, VOCAB = 4096, 512, 201088
MOE_PATHS, ATTN_PATHS = ("glu", "gluq", "down"), ("qkv", "o", "head")


def launches(path: str, quick: bool) -> list[tuple[int, int, int]]:
    """MoE: (BN, KB, num_warps) tried for a path, gluq's BN whole 32-blocks; qkv / o: (BO, G, warps);
    head: (G, BO, warps)."""
    if path in ("qkv", "o"):
        return list(itertools.product((2, 4, 8, 16), (8, 16, 32), (1, 2, 4)))
    if path == "head":
        return list(itertools.product((4, 8, 16), (2, 4, 8, 16), (1, 2, 4)))
    bns = (32, 64) if path == "gluq" else (4, 8, 16, 32)
    kbs = (4, 8, 16) if quick else (4, 8, 16, 32)
    warps = (2, 4) if quick else (1, 2, 4, 8)
    return list(itertools.product(bns, kbs, warps))


def step_fn(path: str, launch, layers, t: int, gen: torch.Generator):
    """One token batch of t through 24 layers' launches of path."""
    dev = "cuda"
    ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(t)]).view(-1).to(dev)
    bias = torch.zeros(EXPERTS, FFN, device=dev, dtype=torch.bfloat16)
    rw = torch.full((t * TOP_K,), 0.25, device=dev)
    xq = quantize_x(torch.randn(t, HIDDEN, device=dev, dtype=torch.bfloat16))
    aq = quantize_x(torch.randn(t * TOP_K, FFN, device=dev, dtype=torch.bfloat16) * 0.1)
    res = torch.zeros(t, HIDDEN, device=dev, dtype=torch.bfloat16)

    def run():
        for wg, wu, wd in layers:
            if path == "down":
                moe_gemv_i8(aq, ids, wd, None, bias, None, rw, TOP_K, slots=TOP_K, residual=res,
                            launch=launch)
            else:
                moe_gemv_i8(xq, ids, wg, wu, bias, bias, None, TOP_K, launch=launch, quant_out=path == "gluq")
    distinct = ids.unique().numel()
    return run, distinct


def attn_fn(path: str, launch, attn, head, t: int):
    """One token batch of t through 24 layers' q|k|v or o launches, or one LM head launch -> (fn, bytes)."""
    dev = "cuda"
    if path == "head":
        x = torch.randn(t, HIDDEN, device=dev, dtype=torch.bfloat16)
        y = torch.empty(t, VOCAB, device=dev, dtype=torch.bfloat16)
        return (lambda: launch_gemv(x, head, y, T.Q8_0, VOCAB, HIDDEN, *launch)), head.nbytes
    k = HIDDEN if path == "qkv" else Q_OUT
    xq, xs = quantize_x(torch.randn(t, k, device=dev, dtype=torch.bfloat16))
    res = torch.zeros(t, HIDDEN, device=dev, dtype=torch.bfloat16)

    def run():
        for qkv, o in attn:
            if path == "qkv":
                q8_gemv_i8(xq, xs, qkv, HIDDEN, torch.bfloat16, launch=launch)
            else:
                q8_gemv_i8(xq, xs, [o], Q_OUT, torch.bfloat16, residual=res, launch=launch)
    per_layer = sum(w[0].nbytes for w in attn[0][0]) if path == "qkv" else attn[0][1][0].nbytes
    return run, per_layer * LAYERS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", default="1,8")
    ap.add_argument("--quick", action="store_true", help="fewer launches (KB <= 16, 2 or 4 warps)")
    ap.add_argument("--warm", default=None, help="I/N: compile this share of the launches and stop")
    a = ap.parse_args()
    part, parts = (int(v) for v in a.warm.split("/")) if a.warm else (0, 1)
    gen = torch.Generator().manual_seed(0)
    raw = [random_mxfp4(EXPERTS, n, k, gen) for n, k in ((FFN, HIDDEN), (FFN, HIDDEN), (HIDDEN, FFN))]
    copies = 1 if a.warm else LAYERS
    layers = [tuple(split_blocks_(w.to("cuda")) for w in raw) for _ in range(copies)]
    expert_bytes = {"glu": raw[0][0].nbytes + raw[1][0].nbytes, "down": raw[2][0].nbytes}
    expert_bytes["gluq"] = expert_bytes["glu"]
    bias = torch.zeros(Q_OUT, device="cuda", dtype=torch.bfloat16)

    def q8(n: int, k: int, seed: int) -> tuple:
        return random_blocks(T.Q8_0, n, k, seed).to("cuda"), n, bias[:n]
    attn = [([q8(Q_OUT, HIDDEN, 3 * i), q8(KV_OUT, HIDDEN, 3 * i + 1), q8(KV_OUT, HIDDEN, 3 * i + 2)],
             q8(HIDDEN, Q_OUT, 100 + i)) for i in range(copies)]
    head = random_blocks(T.Q8_0, VOCAB, HIDDEN, 7).to("cuda")
    defaults = {"glu": I8_MOE_LAUNCH, "gluq": I8_GLU_QUANT_LAUNCH, "down": I8_DOWN_LAUNCH,
                "qkv": Q8_I8_LAUNCH, "o": Q8_I8_LAUNCH, "head": HEAD_LAUNCH_Q8_0[:3]}
    rows = []
    for t in [int(x) for x in a.tokens.split(",")]:
        for path in MOE_PATHS + (ATTN_PATHS if t <= 4 else ()):
            tried = [defaults[path]] + [x for x in launches(path, a.quick) if x != defaults[path]]
            for j, launch in enumerate(tried):
                if path in MOE_PATHS:
                    fn, distinct = step_fn(path, launch, layers, t, torch.Generator().manual_seed(t))
                    read = distinct * expert_bytes[path] * LAYERS
                else:
                    fn, read = attn_fn(path, launch, attn, head, t)
                if a.warm:
                    if j % parts == part:
                        fn()
                    continue
                row = {"tokens": t, "path": path, "launch": list(launch), "default": launch == defaults[path]}
                try:
                    us = graph_ms(fn) * 1000
                    row |= {"us_per_layer": round(us / (1 if path == "head" else LAYERS), 2),
                            "GB_s": round(read / us / 1e3, 1)}
                except Exception as err:  # noqa: BLE001 - a launch that does not compile is a row too
                    row["error"] = str(err).splitlines()[0][:200]
                print(json.dumps(row), flush=True)
                rows.append(row)
    if a.warm:
        return
    Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print("tokens path  default µs/layer (GB/s)   best launch µs/layer (GB/s)   (head: µs per call)")
    for t in sorted({r["tokens"] for r in rows}):
        for path in MOE_PATHS + ATTN_PATHS:
            ok = [r for r in rows if r["tokens"] == t and r["path"] == path and "us_per_layer" in r]
            if ok:
                d = next((r for r in ok if r["default"]), ok[0])
                b = min(ok, key=lambda r: r["us_per_layer"])
                print(f"{t:>6} {path:5} {d['us_per_layer']:8.1f} ({d['GB_s']:.0f})   {b['launch']} "
                      f"{b['us_per_layer']:.1f} ({b['GB_s']:.0f})")


if __name__ == "__main__":
    main()
