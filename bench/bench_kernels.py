"""Kernel-level timings on the GPU for a Qwen2.5-0.5B-shaped Q4_K_M model (random blocks).

Times, each from a CUDA graph replayed after warm-up (so launch gaps are as in a captured decode step):
  - each weight shape's fused GEMV (N = 1) over enough copies of the weight to defeat the 50 MB L2;
  - all of one token's matrix products (24 layers x 7 + LM head) in one graph: fused vs bf16 F.linear;
  - paged decode attention at 4096 tokens of context, 24 layers.
Usage: python bench/bench_kernels.py [--out DIR]   (writes kernels.json there)
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from gpu_blocks import random_blocks  # noqa: E402

from orcd.models.layers.attention_triton import paged_decode_attention  # noqa: E402
from orcd.quant.kernels import get_fused_linear  # noqa: E402

# Qwen2.5-0.5B Q4_K_M: (name, qtype, out, in) per layer, then the tied LM head
LAYER = [("attn_q", T.Q5_0, 896, 896), ("attn_k", T.Q5_0, 128, 896), ("attn_v", T.Q8_0, 128, 896),
         ("attn_output", T.Q5_0, 896, 896), ("ffn_gate", T.Q5_0, 4864, 896), ("ffn_up", T.Q5_0, 4864, 896),
         ("ffn_down", T.Q4_K, 896, 4864), ("ffn_down_q6k", T.Q6_K, 896, 4864)]
HEAD = ("lm_head", T.Q8_0, 151936, 896)
N_LAYERS = 24


def graph_time_ms(fn, reps: int = 20) -> float:
    """Capture fn() once in a CUDA graph; median ms per replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def calls(fn, arglist):
    """A thunk running fn(*args) for each args in arglist (binds its inputs, unlike a loop lambda)."""
    return lambda: [fn(*a) for a in arglist]


def per_shape(rows: list[dict]) -> None:
    x = torch.randn(1, 4864, device="cuda", dtype=torch.bfloat16)
    for name, qt, out_f, in_f in LAYER + [HEAD]:
        raw = random_blocks(qt, out_f, in_f, seed=1).cuda()
        copies = max(1, min(256, (256 << 20) // raw.numel()))
        raws = [raw.clone() for _ in range(copies)]
        fused = get_fused_linear(qt, "cuda")
        xi = x[:, :in_f].contiguous()
        ms = graph_time_ms(calls(fused, [(xi, r, out_f, in_f) for r in raws])) / copies
        w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16)
        ws = [w.clone() for _ in range(max(1, min(256, (256 << 20) // (w.numel() * 2))))]
        ms_bf16 = graph_time_ms(calls(F.linear, [(xi, wi) for wi in ws])) / len(ws)
        rows.append({"kernel": f"gemv {name} {qt.name} {out_f}x{in_f}", "us": ms * 1e3,
                     "GB/s": raw.numel() / ms / 1e6, "bf16 F.linear us": ms_bf16 * 1e3,
                     "bf16 GB/s": w.numel() * 2 / ms_bf16 / 1e6})
        del raws, ws


def sweep(rows: list[dict]) -> None:
    """GEMV (groups per pass, rows per program, warps) for five shapes (tuning aid)."""
    from orcd.quant.kernels.fused_linear import BLOCK_SIZE, GEMV_GROUPS, TYPE_SIZE, _gemv_kernel, gemv_config

    for name, qt, out_f, in_f in [LAYER[0], LAYER[5], LAYER[6], LAYER[7], HEAD]:
        qi = int(qt)
        raw = random_blocks(qt, out_f, in_f, seed=1).cuda()
        raws = [raw.clone() for _ in range(max(1, min(64, (256 << 20) // raw.numel())))]
        x = torch.randn(1, in_f, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(1, out_f, device="cuda", dtype=torch.bfloat16)
        row_bytes = in_f // BLOCK_SIZE[qi] * TYPE_SIZE[qi]
        epg, u = GEMV_GROUPS[qi]
        g0, bo0, w0 = gemv_config(qi, out_f, in_f)
        for g in (max(1, g0 // 2), g0, 2 * g0):
            for bo in (4, 8, 16):
                for nw in (1, 2, 4):
                    kern = _gemv_kernel[(triton.cdiv(out_f, bo), 1)]
                    args = [(x, r, r.view(-1).view(torch.int16), r.view(-1).view(torch.int32) if qi == 12
                             else r.view(-1).view(torch.int16), y, out_f, in_f, row_bytes, in_f, out_f,
                             qi, epg, u, g, bo) for r in raws]
                    ms = graph_time_ms(calls(functools.partial(kern, num_warps=nw), args)) / len(raws)
                    mark = " (default)" if (g, bo, nw) == (g0, bo0, w0) else ""
                    rows.append({"kernel": f"sweep {name} G={g} BO={bo} warps={nw}{mark}", "us": ms * 1e3,
                                 "GB/s": raw.numel() / ms / 1e6})


def whole_token(rows: list[dict], n: int, gemv_max_n: int = 4) -> None:
    """All matrix products of one decode step for n tokens: fused over raw blocks vs bf16."""
    import orcd.quant.kernels.fused_linear as fl

    fl.GEMV_MAX_N = gemv_max_n
    layers = [(random_blocks(qt, o, i, seed=li).cuda(), qt, o, i)
              for li in range(N_LAYERS) for (_, qt, o, i) in LAYER[:7]]
    layers.append((random_blocks(HEAD[1], HEAD[2], HEAD[3], seed=99).cuda(), *HEAD[1:]))
    nbytes = sum(r.numel() for r, *_ in layers)
    xs = {i: torch.randn(n, i, device="cuda", dtype=torch.bfloat16) for i in (896, 4864)}
    fns = [(get_fused_linear(qt, "cuda"), r, o, i) for r, qt, o, i in layers]
    ms = graph_time_ms(calls(lambda f, *a: f(*a), [(f, xs[i], r, o, i) for f, r, o, i in fns]))
    fl.GEMV_MAX_N = 4
    rows.append({"kernel": f"all GEMMs of one step, N={n}, fused, gemv<={gemv_max_n}", "us": ms * 1e3,
                 "GB/s": nbytes / ms / 1e6, "MiB": nbytes / 2**20})
    del fns, layers
    ws = [(torch.randn(o, i, device="cuda", dtype=torch.bfloat16), i)
          for _ in range(N_LAYERS) for (_, _, o, i) in LAYER[:7]]
    ws.append((torch.randn(HEAD[2], HEAD[3], device="cuda", dtype=torch.bfloat16), 896))
    wbytes = sum(w.numel() * 2 for w, _ in ws)
    ms = graph_time_ms(calls(F.linear, [(xs[i], w) for w, i in ws]))
    rows.append({"kernel": f"all GEMMs of one step, N={n}, bf16 F.linear", "us": ms * 1e3,
                 "GB/s": wbytes / ms / 1e6, "MiB": wbytes / 2**20})


def attention(rows: list[dict], depth: int, batch: int) -> None:
    from attn_ref import random_paged_case

    q, k, v, tables, sl = random_paged_case([depth] * batch, 14, 2, 64, 16, torch.bfloat16, "cuda", seed=0)
    ks = [k.clone() for _ in range(N_LAYERS)]
    vs = [v.clone() for _ in range(N_LAYERS)]
    args = [(q, ks[i], vs[i], tables, sl, 0.125) for i in range(N_LAYERS)]
    ms = graph_time_ms(calls(paged_decode_attention, args))
    kv_bytes = 2 * depth * batch * 2 * 64 * 2
    rows.append({"kernel": f"paged decode attn x24, B={batch}, depth {depth}", "us": ms * 1e3,
                 "GB/s": kv_bytes * N_LAYERS / ms / 1e6})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--sweep", action="store_true", help="also sweep GEMV launch shapes")
    args = ap.parse_args()
    rows: list[dict] = []
    per_shape(rows)
    if args.sweep:
        sweep(rows)
    for n, gmax in ((1, 4), (4, 4), (8, 4), (16, 4), (32, 4), (64, 4)):
        whole_token(rows, n, gmax)
    for depth, batch in ((4096, 1), (512, 1), (1024, 32)):
        attention(rows, depth, batch)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "kernels.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                          "rows": rows}, indent=1))
    for r in rows:
        extra = "".join(f" | {k} {v:.1f}" for k, v in r.items() if k not in ("kernel", "us"))
        print(f"{r['kernel']:<48} {r['us']:9.1f} us{extra}")


if __name__ == "__main__":
    main()
