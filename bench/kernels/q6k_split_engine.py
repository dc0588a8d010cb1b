"""q6k_layout gguf vs split (issue 16) on one GPU: the converted kernels' split == GGUF checks and int8
GEMV times at the 7B's Q6_K shapes, then the 7B engine's decode at 1 and 8 streams with each layout
(LLMEngine over load_model(q6k_layout=...), bench/peers/orcd_side.py's decode rounds) and whether the
two layouts generate the same greedy tokens. The figure that decides the default.

usage: python bench/kernels/q6k_split_engine.py OUT.json [--model 7b.gguf] [--streams 1,8] [--gen 128]
       (CUDA; without --model a qwen2.5-7b Q4_K_M shaped file is synthesized at /tmp/q6k_7b.gguf; the
       table is printed last and written to OUT.md)
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
from orcd_side import decode_round  # noqa: E402
from products import blocks, copies_for, graph_time  # noqa: E402

from orcd.engine.io import EngineRequest  # noqa: E402
from orcd.engine.llm_engine import LLMEngine  # noqa: E402
from orcd.engine.sampling_params import SamplingParams  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.quant.kernels.dequant_kernel import dequantize_raw  # noqa: E402
from orcd.quant.kernels.fused_linear import fused_linear  # noqa: E402
from orcd.quant.kernels.gemv3_int8 import gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402
from orcd.quant.kernels.q6k_split import split_linear  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

SHAPES = [("down", 3584, 18944), ("lm_head", 152064, 3584), ("v", 512, 3584)]


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def kernel_rows() -> list[dict]:
    """Per 7B Q6_K shape: max |split - gguf| of gemv_i8 at 1, 4, 8 rows, of dequantize_raw and of
    split_linear at 1, 8, 64 rows (vs fused_linear on GGUF: the same routing, so 0); µs of gemv_i8 at 1
    row and of split_linear / fused_linear at 8 rows (the batched step's product) each way (>= 200 MB
    rotated)."""
    rows = []
    for name, n, k in SHAPES:
        nbytes = n * k // 256 * 210
        ws = [blocks(Q.Q6_K, n, k, i) for i in range(copies_for(nbytes))]
        sp = [split_q6_k(w) for w in ws]
        err = 0.0
        for m in (1, 4, 8):
            xq, xs = quantize_x(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
            err = max(err, diff(gemv_i8(xq, xs, sp[0], n, k, Q.Q6_K, split=True),
                                gemv_i8(xq, xs, ws[0], n, k, Q.Q6_K)))
        lin_err = 0.0
        for m in (1, 8, 64):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            lin_err = max(lin_err, diff(split_linear(x, sp[0], n, k), fused_linear(x, ws[0], n, k, Q.Q6_K)))
        x8 = torch.randn(8, k, device="cuda", dtype=torch.bfloat16)
        t8_g = graph_time([partial(fused_linear, x8, w, n, k, Q.Q6_K) for w in ws])
        t8_s = graph_time([partial(split_linear, x8, w, n, k) for w in sp])
        deq_err = diff(dequantize_raw(sp[0], Q.Q6_K, n, k, torch.bfloat16, split=True),
                       dequantize_raw(ws[0], Q.Q6_K, n, k, torch.bfloat16))
        xq, xs = quantize_x(torch.randn(1, k, device="cuda", dtype=torch.bfloat16))
        t_g = graph_time([partial(gemv_i8, xq, xs, w, n, k, Q.Q6_K) for w in ws])
        t_s = graph_time([partial(gemv_i8, xq, xs, w, n, k, Q.Q6_K, split=True) for w in sp])
        rows.append(dict(name=f"{name} {n}x{k}", gemv_err=err, linear_err=lin_err, dequant_err=deq_err,
                         gguf_us=t_g * 1e6, split_us=t_s * 1e6, gguf_TBps=nbytes / t_g / 1e12,
                         split_TBps=nbytes / t_s / 1e12, gguf_us8=t8_g * 1e6, split_us8=t8_s * 1e6))
        print(rows[-1], flush=True)
        del ws, sp
    xq, xs = quantize_x(torch.randn(2, 3584, device="cuda", dtype=torch.bfloat16))
    qkv = ((Q.Q4_K, 3584), (Q.Q4_K, 512), (Q.Q6_K, 512))
    ws = [(blocks(t, n, 3584, 50 + j), n, int(t), None) for j, (t, n) in enumerate(qkv)]
    want = gemv3_i8(xq, xs, ws, 3584, torch.bfloat16)
    ws[2] = (split_q6_k(ws[2][0]), *ws[2][1:])
    got = gemv3_i8(xq, xs, ws, 3584, torch.bfloat16, split=(False, False, True))
    rows.append(dict(name="gemv3_i8 q/k Q4_K, v Q6_K split, 2 rows", gemv_err=max(map(diff, got, want))))
    return rows


def greedy(eng: LLMEngine, prompts: list[list[int]], gen: int) -> list[list[int]]:
    """Greedy tokens of each prompt, all added at once."""
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    out: dict[str, list[int]] = {f"g{i}": [] for i in range(len(prompts))}
    for i, p in enumerate(prompts):
        eng.add_request(EngineRequest(f"g{i}", p, sp))
    while eng.has_work():
        for ev in eng.step():
            if ev.token_id is not None and ev.request_id in out:
                out[ev.request_id].append(ev.token_id)
    return list(out.values())


def engine_run(path: str, layout: str, streams: list[int], gen: int) -> dict:
    rng = random.Random(0)
    t0 = time.perf_counter()
    loaded = load_model(path, device="cuda", q6k_layout=layout)
    eng = LLMEngine(loaded, num_kv_blocks=max(streams) * -(-(128 + gen) // 16) + 256, max_num_seqs=64,
                    enable_prefix_caching=False)
    res = {"layout": layout, "load_and_init_s": time.perf_counter() - t0, "decode": {},
           "split_weights": sum(getattr(m, "layout", "") == "split" for m in loaded.model.modules()),
           "device_allocated_GiB": torch.cuda.memory_allocated() / 2**30}
    for c in streams:  # warm-up: every batch shape once (Triton compiles, graphs capture)
        decode_round(eng, c, 128, 8, rng)
    for c in streams:
        res["decode"][str(c)] = decode_round(eng, c, 128, gen, rng)["decode_tok_s"]
        print(f"{layout} decode {c} streams: {res['decode'][str(c)]:.1f} tok/s", flush=True)
    prompts = [[random.Random(i).randrange(100, 150000) for _ in range(64)] for i in range(8)]
    res["tokens_1"] = greedy(eng, prompts[:1], 32)
    res["tokens_8"] = greedy(eng, prompts, 32)
    del eng, loaded
    gc.collect()
    torch.cuda.empty_cache()
    return res


def table(kern: list[dict], runs: list[dict]) -> str:
    dev = torch.cuda.get_device_name()
    lines = [f"# q6k_layout gguf vs split ({dev})", "",
             "| Q6_K product | max abs split-gguf (gemv_i8 1/4/8 rows; split_linear 1/8/64; dequant) "
             "| gguf µs | split µs | gguf TB/s | split TB/s | gguf µs 8 rows | split µs 8 rows |",
             "|---|---|---|---|---|---|---|---|"]
    for r in kern:
        lines.append(f"| {r['name']} | {r['gemv_err']:.1e}; {r.get('linear_err', 0):.1e}; "
                     f"{r.get('dequant_err', 0):.1e} | {r.get('gguf_us', 0):.1f} | "
                     f"{r.get('split_us', 0):.1f} | "
                     f"{r.get('gguf_TBps', 0):.2f} | {r.get('split_TBps', 0):.2f} | "
                     f"{r.get('gguf_us8', 0):.1f} | {r.get('split_us8', 0):.1f} |")
    streams = list(runs[0]["decode"])
    lines += ["", "| layout | split weights | " + " | ".join(f"{c} streams tok/s" for c in streams)
              + " | alloc GiB |", "|---|---|" + "---|" * len(streams) + "---|"]
    for r in runs:
        lines.append(f"| {r['layout']} | {r['split_weights']} | "
                     + " | ".join(f"{r['decode'][c]:.1f}" for c in streams)
                     + f" | {r['device_allocated_GiB']:.2f} |")
    g, s = runs
    for key in ("tokens_1", "tokens_8"):
        same = sum(a == b for x, y in zip(g[key], s[key], strict=True) for a, b in zip(x, y, strict=True))
        total = sum(len(x) for x in g[key])
        lines.append(f"greedy tokens gguf == split ({key[-1]} prompt(s) x 32): {same}/{total}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--model", default=None)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--gen", type=int, default=128)
    a = ap.parse_args()
    path = a.model or "/tmp/q6k_7b.gguf"
    if a.model is None and not Path(path).exists():
        synth = ["-m", "orcd", "synth", "--like", "qwen2.5-7b", "--quant", "Q4_K_M", path]
        subprocess.run([sys.executable, *synth], check=True)
    kern = kernel_rows()
    streams = [int(s) for s in a.streams.split(",")]
    runs = [engine_run(path, layout, streams, a.gen) for layout in ("gguf", "split")]
    doc = {"device": torch.cuda.get_device_name(), "kernels": kern, "engine": runs}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    text = table(kern, runs)
    Path(a.out).with_suffix(".md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
