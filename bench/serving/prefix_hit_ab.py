"""Issue 19, the engine alone: requests arriving a few ms apart (as over HTTP), short cached prefixes
taken (min_prefix_hit 0: the engine before the fix) against recomputed (the engine's default).

Over HTTP, 8 concurrent chat requests reach the engine over a few ms, so the first is prefilled alone
and the rest are admitted a step later, when the template's first block (16 tokens: "<|im_start|>user\\n
Request NNNN-") is already in the prefix cache. A step holding a cached prefix cannot replay a prefill
CUDA graph and runs eagerly. This script sends the serving benchmark's own rounds (serving_load.
fixed_round, the same seeds' shapes) to one LLMEngine in this process, `--stagger-ms` apart, under both
rules alternately, with fresh prompts for each round (no hits across rounds), and prints per (route,
streams, rule) the median TTFT, tok/s, prefix-cache tokens taken / recomputed and prefill-graph replays.

Usage: python bench/serving/prefix_hit_ab.py --model /tmp/q.gguf [--streams 1,8] [--repeat 3]
       [--stagger-ms 1] [--out F.json]   (CPU smoke: --device cpu --gen-len 4 --min-prefix-hit 64)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batching_engine import kv_blocks_for  # noqa: E402
from serving_engine import engine_requests, load_engine_bench  # noqa: E402
from serving_load import fixed_round, round_stats  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--routes", default="chat,generate")
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stagger-ms", type=float, default=1.0, help="gap between arrivals in a round")
    ap.add_argument("--min-prefix-hit", type=int, default=None,
                    help="the rule compared with 0 (default: the engine's own, 64 with prefill graphs)")
    ap.add_argument("--out", default=None, help="also write the rows here (JSON)")
    args = ap.parse_args(argv)
    args.streams = [int(x) for x in args.streams.split(",")]
    args.routes = args.routes.split(",")
    return args


def one_round(bench, tok, args, route: str, c: int, seed: int, rule: int) -> dict:
    engine = bench.engine
    engine.block_manager.min_prefix_hit = rule
    reqs = [replace(r, at=i * args.stagger_ms / 1000)
            for i, r in enumerate(fixed_round(tok, route, c, args.prompt_len, args.gen_len, "m", seed))]
    graphs = getattr(engine.runner, "prefill_graphs", None)
    before = (engine.stats(), graphs.replays if graphs is not None else 0)
    stats = round_stats(*bench.run(engine_requests(tok, reqs)))
    after = (engine.stats(), graphs.replays if graphs is not None else 0)
    return {"route": route, "streams": c, "min_prefix_hit": rule, "seed": seed,
            "ttft_p50_ms": stats["ttft_p50_ms"], "tok_s": stats["http_tok_s"],
            "hit_tokens": after[0]["prefix_cache_hits"] - before[0]["prefix_cache_hits"],
            "recomputed_tokens": after[0]["prefix_cache_recomputed"] - before[0]["prefix_cache_recomputed"],
            "prefill_graph_replays": after[1] - before[1]}


def summary(rows: list[dict]) -> list[dict]:
    keys = sorted({(r["route"], r["streams"], r["min_prefix_hit"]) for r in rows})
    out = []
    for route, c, rule in keys:
        rs = [r for r in rows if (r["route"], r["streams"], r["min_prefix_hit"]) == (route, c, rule)]
        out.append({"route": route, "streams": c, "min_prefix_hit": rule,
                    "ttft_p50_ms": statistics.median(r["ttft_p50_ms"] or 0 for r in rs),
                    "tok_s": statistics.median(r["tok_s"] or 0 for r in rs),
                    "hit_tokens": sum(r["hit_tokens"] for r in rs),
                    "recomputed_tokens": sum(r["recomputed_tokens"] for r in rs),
                    "prefill_graph_replays": sum(r["prefill_graph_replays"] for r in rs)})
    return out


def main(argv: list[str] | None = None) -> int:
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    args = parse_args(argv)
    tok = load_tokenizer(open_gguf(args.model).metadata)
    bench = load_engine_bench(args.model, args.device,
                              kv_blocks_for(max(args.streams), args.prompt_len + 64, args.gen_len), 64)
    default = args.min_prefix_hit
    if default is None:
        default = bench.engine.block_manager.min_prefix_hit
    print(f"min_prefix_hit 0 vs {default} (prefill graphs: "
          f"{getattr(bench.engine.runner, 'prefill_graphs', None) is not None})", flush=True)
    for route in args.routes:  # warm-up: Triton, the tokenizer, every bucket's first replay
        for c in args.streams:
            bench.run(engine_requests(tok, fixed_round(tok, route, c, args.prompt_len, 8, "m", 10_000 + c)))
    rows = []
    for k in range(1, args.repeat + 1):
        for route in args.routes:
            for c in args.streams:
                rules = (0, default) if k % 2 else (default, 0)  # alternate the order: drift hits both
                for j, rule in enumerate(rules):  # seeds of the same digit count: the same block sharing
                    rows.append(one_round(bench, tok, args, route, c, c + 7919 * k + j, rule))
                    print(json.dumps(rows[-1]), flush=True)
    table = summary(rows)
    if args.out:
        Path(args.out).write_text(json.dumps({"rounds": rows, "summary": table}, indent=1))
    print("\n| route | streams | min_prefix_hit | TTFT p50 ms | tok/s | hit tokens | recomputed "
          "| graph replays |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['route']} | {r['streams']} | {r['min_prefix_hit']} | {r['ttft_p50_ms']:.1f} | "
              f"{r['tok_s']:,.0f} | {r['hit_tokens']} | {r['recomputed_tokens']} | "
              f"{r['prefill_graph_replays']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
