"""Decode tok/s through the real engine (LLMEngine.step(), scheduler + runner + sampler + detokenizer).

For each mode (CUDA graphs of the fused decode step, then --enforce-eager) and each stream count C:
C random prompts of --prompt-len tokens, greedy, ignore_eos, --steps new tokens each. Decode tok/s =
tokens generated after every stream has its first token / the time from then to the last token.
Writes OUT/engine_decode.json and prints a table.
Usage: python bench/decode/engine_decode.py --model F.gguf [--out DIR] [--concurrency 1,8,32,64] [--steps 128]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path

import torch


def one_round(engine, c: int, prompt_len: int, steps: int, seed: int) -> dict:
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams

    rng = random.Random(seed)
    vocab = engine.cfg.vocab_size
    sp = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    for i in range(c):
        prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
        engine.add_request(EngineRequest(f"s{seed}-{i}", prompt, sp))
    started: set[str] = set()
    t0 = time.perf_counter()
    t_dec, n_dec, n_steps = None, 0, 0
    while engine.has_work():
        events = engine.step()
        n_steps += 1
        for ev in events:
            if ev.error:
                raise RuntimeError(ev.error)
            if ev.token_id is None:
                continue
            if t_dec is not None:
                n_dec += 1
            started.add(ev.request_id)
        if t_dec is None and len(started) == c:
            t_dec = time.perf_counter()
    t1 = time.perf_counter()
    return {"streams": c, "decode_tok_s": n_dec / (t1 - t_dec) if n_dec else None,
            "ms_per_step": 1e3 * (t1 - t_dec) / max(1, n_steps - 1), "wall_s": t1 - t0, "steps": n_steps}


def bench_mode(loaded, eager: bool, args) -> dict:
    from orcd.engine.llm_engine import LLMEngine

    blocks = max(args.concurrency) * (-(-(args.prompt_len + args.steps) // 16) + 1) + 16
    t0 = time.perf_counter()
    engine = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=64, enforce_eager=eager)
    graph = engine.runner.graph
    res = {"mode": "cuda_graphs" if graph else "eager", "engine_init_s": time.perf_counter() - t0,
           "capture_s": graph.capture_seconds if graph else None,
           "buckets": list(graph.buckets) if graph else None, "fused": graph.fused if graph else None,
           "rounds": []}
    for c in args.concurrency:  # warm-up: each shape once (Triton compiles)
        one_round(engine, c, args.prompt_len, 4, seed=1000 + c)
    for c in args.concurrency:
        r = one_round(engine, c, args.prompt_len, args.steps, seed=c)
        res["rounds"].append(r)
        print(f"{res['mode']:12s} C={c:3d}: {r['decode_tok_s']:9,.0f} tok/s  {r['ms_per_step']:.3f} ms/step",
              flush=True)
    if graph:
        res["graph_steps"] = graph.steps
    del engine
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--skip-eager", action="store_true")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    from orcd.loading.loader import load_model

    loaded = load_model(args.model, args.device)
    dev = torch.cuda.get_device_name() if loaded.device.type == "cuda" else "cpu"
    out = {"device": dev, "model": args.model, "steps": args.steps,
           "prompt_len": args.prompt_len, "command": " ".join(["python", *sys.argv]), "modes": []}
    for eager in ([False] if args.skip_eager else [False, True]):
        out["modes"].append(bench_mode(loaded, eager, args))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "engine_decode.json").write_text(json.dumps(out, indent=1))
    print("\n| streams | " + " | ".join(m["mode"] for m in out["modes"]) + " |")
    print("|---|" + "---|" * len(out["modes"]))
    for i, c in enumerate(args.concurrency):
        cells = [f"{m['rounds'][i]['decode_tok_s']:,.0f} tok/s" for m in out["modes"]]
        print(f"| {c} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
