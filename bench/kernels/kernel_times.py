"""Kernel-level timings on the GPU for a Qwen2.5-0.5B-shaped Q4_K_M model (random blocks).

Times, each from a CUDA graph replayed after warm-up (so launch gaps are as in a captured decode step):
  - each weight shape's fused GEMV (N = 1) over enough copies of the weight to defeat the 50 MB L2;
  - all of one token's matrix products (24 layers x 7 + LM head) in one graph: fused vs bf16 F.linear;
  - paged decode attention at 4096 tokens of context, 24 layers;
  - with --step-kernels: each decode-step kernel as FusedDecoder (fuse_norm) launches it (norm, residual,
    SwiGLU, split-K epilogues), with the code's own launch settings.
Usage: python bench/kernels/kernel_times.py [--out DIR] [--sweep] [--step-kernels] [--only]
       (writes kernels.json there)
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
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


def step_kernels(rows: list[dict], tag: str) -> None:
    """Each decode-step kernel as FusedDecoder (fuse_norm) launches it, N = 1, over weight copies."""
    from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu
    from orcd.quant.kernels.gemv_multi import fused_gemv3

    h, f = 896, 4864
    x = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)
    act = torch.randn(1, f, device="cuda", dtype=torch.bfloat16)
    res = torch.zeros(1, h, device="cuda", dtype=torch.bfloat16)
    nrm = (torch.rand(h, device="cuda", dtype=torch.bfloat16), 1e-6)
    bias = [torch.randn(o, device="cuda", dtype=torch.bfloat16) for o in (896, 128, 128)]

    def qkv(raws):
        outs = [(T.Q5_0, 896), (T.Q5_0, 128), (T.Q8_0, 128)]
        ws = [(r, o, qt, b) for r, (qt, o), b in zip(raws, outs, bias, strict=True)]
        return fused_gemv3(x, ws, h, norm=nrm)

    def down(qt):
        return lambda r: fused_gemv(act, r[0], h, f, qt, residual=res)

    cases = {  # name -> (list of (qtype, out, in) weights per call, call(raws), bytes per call)
        "qkv Q5_0/Q8_0 (norm, bias)": ([(T.Q5_0, 896, h), (T.Q5_0, 128, h), (T.Q8_0, 128, h)], qkv),
        "o_proj Q5_0 (res)": ([(T.Q5_0, 896, h)], lambda r: fused_gemv(x, r[0], h, h, T.Q5_0, residual=res)),
        "gate+up Q5_0 (norm, SwiGLU)": ([(T.Q5_0, f, h)] * 2,
                                        lambda r: fused_glu(x, r[0], r[1], f, h, T.Q5_0, norm=nrm)),
        "ffn_down Q4_K (res)": ([(T.Q4_K, h, f)], down(T.Q4_K)),
        "ffn_down Q6_K (res)": ([(T.Q6_K, h, f)], down(T.Q6_K)),
        "lm_head Q8_0 (norm)": ([HEAD[1:]], lambda r: fused_gemv(x, r[0], HEAD[2], h, T.Q8_0, norm=nrm)),
        "lm_head Q8_0": ([HEAD[1:]], lambda r: fused_gemv(x, r[0], HEAD[2], h, T.Q8_0)),
    }
    for name, (specs, call) in cases.items():
        ws = [random_blocks(qt, o, i, seed=j).cuda() for j, (qt, o, i) in enumerate(specs)]
        nbytes = sum(w.numel() for w in ws)
        copies = max(1, min(128, (256 << 20) // nbytes))
        sets = [([w.clone() for w in ws],) for _ in range(copies)]
        ms = graph_time_ms(calls(call, sets)) / copies
        rows.append({"kernel": f"step {name} [{tag}]", "us": ms * 1e3, "GB/s": nbytes / ms / 1e6})


def sweep(rows: list[dict]) -> None:
    """Launch shapes of the decode GEMVs that matter most (tuning aid): ffn_down (G, BO, warps, K splits)
    with its residual epilogue, and the SwiGLU kernel (G, BO, warps) with its norm prologue."""
    from orcd.quant.kernels.fused_linear import fused_glu, launch_gemv

    h, f = 896, 4864
    act = torch.randn(1, f, device="cuda", dtype=torch.bfloat16)
    res = torch.zeros(1, h, device="cuda", dtype=torch.bfloat16)
    for qt in (T.Q4_K, T.Q6_K):
        raws = [random_blocks(qt, h, f, seed=1).cuda() for _ in range(64)]
        for g, bo, nw, sp in SWEEP_DOWN[qt]:
            args = [(act, r, res, int(qt), h, f, g, bo, nw, sp, None, None, True) for r in raws]
            try:
                ms = graph_time_ms(calls(launch_gemv, args)) / len(raws)
            except Exception as e:  # noqa: BLE001 - a shape that does not compile is reported, not fatal
                print(f"sweep down {qt.name} {g, bo, nw, sp}: {type(e).__name__} {str(e)[:200]}")
                continue
            rows.append({"kernel": f"sweep down {qt.name} G={g} BO={bo} warps={nw} splits={sp}",
                         "us": ms * 1e3, "GB/s": raws[0].numel() / ms / 1e6})
    x = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)
    nrm = (torch.rand(h, device="cuda", dtype=torch.bfloat16), 1e-6)
    pairs = [(random_blocks(T.Q5_0, f, h, seed=1).cuda(), random_blocks(T.Q5_0, f, h, seed=2).cuda())
             for _ in range(32)]
    for launch in SWEEP_GLU:
        glu = functools.partial(fused_glu, norm=nrm, launch=launch)
        try:
            ms = graph_time_ms(calls(glu, [(x, a, b, f, h, T.Q5_0) for a, b in pairs])) / len(pairs)
        except Exception as e:  # noqa: BLE001
            print(f"sweep glu {launch}: {type(e).__name__} {str(e)[:200]}")
            continue
        rows.append({"kernel": "sweep glu Q5_0 G={} BO={} warps={}".format(*launch), "us": ms * 1e3,
                     "GB/s": 2 * pairs[0][0].numel() / ms / 1e6})


# (G, BO, warps, splits) for ffn_down; (G, BO, warps) for SwiGLU
SWEEP_DOWN = {
    T.Q4_K: [(32, 4, 4, 1), (16, 4, 4, 1), (8, 4, 4, 1), (16, 4, 4, 2), (8, 4, 4, 2), (8, 4, 4, 3),
             (8, 4, 2, 4), (16, 4, 2, 2), (16, 2, 2, 1), (32, 2, 2, 1), (16, 1, 1, 1), (32, 1, 2, 1),
             (8, 2, 2, 2), (16, 8, 4, 2), (8, 8, 4, 4)],
    T.Q6_K: [(16, 4, 4, 1), (8, 4, 4, 1), (8, 4, 4, 2), (4, 4, 4, 3), (4, 4, 2, 4), (8, 4, 2, 2),
             (16, 2, 2, 1), (8, 2, 2, 1), (8, 1, 1, 1), (16, 1, 2, 1), (4, 2, 2, 2), (8, 8, 4, 2),
             (4, 8, 4, 4)],
}
SWEEP_GLU = [(16, 4, 2), (32, 4, 2), (8, 4, 2), (16, 4, 4), (16, 2, 1), (16, 2, 2), (32, 2, 2), (16, 8, 4),
             (32, 8, 4), (16, 1, 1), (32, 1, 1)]


def whole_token(rows: list[dict], n: int) -> None:
    """All matrix products of one decode step for n tokens: fused over raw blocks vs bf16 (n above
    fused_linear.GEMV_MAX_N takes the dequantize + cuBLAS path)."""
    from orcd.quant.kernels.fused_linear import GEMV_MAX_N

    layers = [(random_blocks(qt, o, i, seed=li).cuda(), qt, o, i)
              for li in range(N_LAYERS) for (_, qt, o, i) in LAYER[:7]]
    layers.append((random_blocks(HEAD[1], HEAD[2], HEAD[3], seed=99).cuda(), *HEAD[1:]))
    nbytes = sum(r.numel() for r, *_ in layers)
    xs = {i: torch.randn(n, i, device="cuda", dtype=torch.bfloat16) for i in (896, 4864)}
    fns = [(get_fused_linear(qt, "cuda"), r, o, i) for r, qt, o, i in layers]
    ms = graph_time_ms(calls(lambda f, *a: f(*a), [(f, xs[i], r, o, i) for f, r, o, i in fns]))
    rows.append({"kernel": f"all GEMMs of one step, N={n}, fused, gemv<={GEMV_MAX_N}", "us": ms * 1e3,
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
    ap.add_argument("--step-kernels", action="store_true",
                    help="each decode-step kernel as FusedDecoder (fuse_norm) launches it")
    ap.add_argument("--only", action="store_true", help="only the parts asked for by the flags above")
    args = ap.parse_args()
    rows: list[dict] = []
    if args.step_kernels:
        step_kernels(rows, "defaults")
    if args.sweep:
        sweep(rows)
    if args.only:
        return report(rows, args.out)
    per_shape(rows)
    for n in (1, 4, 8, 16, 32, 64):
        whole_token(rows, n)
    for depth, batch in ((4096, 1), (512, 1), (1024, 32)):
        attention(rows, depth, batch)
    report(rows, args.out)


def report(rows: list[dict], out: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, "kernels.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                     "rows": rows}, indent=1))
    for r in rows:
        extra = "".join(f" | {k} {v:.1f}" for k, v in r.items() if isinstance(v, float) and k != "us")
        print(f"{r['kernel']:<48} {r['us']:9.1f} us{extra}")


if __name__ == "__main__":
    main()
