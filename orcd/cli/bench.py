"""`orcd bench MODEL.gguf`: load, prefill and decode speed of one sequence on this machine.

Decode on CUDA replays the batch-1 decode step from a CUDA graph (FusedDecoder's kernels when the
model allows it); on the CPU it runs eagerly. The side-by-side comparison with HF transformers and
the committed results live in bench/decode/graph_vs_hf.py and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from orcd.errors import OrcdError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="GGUF file")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    p.add_argument("--prompt", type=int, default=512, help="prefill length in tokens (default 512)")
    p.add_argument("--depth", type=int, default=0, help="tokens in the cache before decoding (default 0)")
    p.add_argument("--steps", type=int, default=128, help="decode steps to time (default 128)")
    p.add_argument("--page", type=int, default=16, help="KV block size in tokens")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def measure(args: argparse.Namespace) -> dict:
    from orcd.cli.bench_session import OrcdSession
    from orcd.loading.loader import resolve_device

    for name in ("prompt", "steps", "page"):
        if getattr(args, name) < 1:
            raise OrcdError(f"--{name} must be at least 1")
    if args.depth < 0:
        raise OrcdError("--depth must be >= 0")
    dev = resolve_device(args.device).type
    tokens = max(args.prompt, args.depth + args.steps) + 8
    t0 = time.perf_counter()
    s = OrcdSession(args.model, num_blocks=-(-tokens // args.page) + 1, page=args.page, device=dev)
    s.first_token(8)
    res = {"device": dev, "load_to_first_token_s": time.perf_counter() - t0,
           "weights_MiB": s.loaded.weights_bytes / 2**20}
    s.prefill(args.prompt)  # warm-up
    s._sync()
    t1 = time.perf_counter()
    s.prefill(args.prompt)
    s._sync()
    res[f"prefill_{args.prompt}_tok_s"] = args.prompt / (time.perf_counter() - t1)
    if dev == "cuda":
        try:
            res["decode_mode"] = "fused_norm"
            rate = s.decode_graph(args.depth, args.steps, "fused_norm")
        except ValueError:  # a model FusedDecoder cannot run: graph of model.forward
            res["decode_mode"] = "model"
            rate = s.decode_graph(args.depth, args.steps, "model")
        res["peak_device_MiB"] = torch.cuda.max_memory_allocated() / 2**20
    else:
        res["decode_mode"] = "eager"
        rate = s.decode_eager(args.depth, args.steps)
    res[f"decode_d{args.depth}_tok_s"] = rate
    return res


def run(args: argparse.Namespace) -> int:
    res = measure(args)
    if args.json:
        print(json.dumps(res))
        return 0
    for k, v in res.items():
        print(f"{k:<28} {v:,.3f}" if isinstance(v, float) else f"{k:<28} {v}")
    return 0
