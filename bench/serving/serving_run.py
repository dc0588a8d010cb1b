"""One model of serving.py: an engine in this process and an `orcd serve` child, measured alternately.

Every fixed-concurrency repeat runs the same requests twice, first through the engine alone (this
process, serving_engine.py), then over HTTP, so drift (clocks, other load) hits both sides of a ratio;
the row's ratio is the median of the repeats' paired ratios. The mixed load does the same per rate: the
engine alone takes the Poisson arrivals, then the server does.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from batching_common import Deadline
from batching_engine import kv_blocks_for
from batching_http import ServerProcess
from serving_client import run_load
from serving_engine import EngineBench, engine_requests, load_engine_bench
from serving_load import fixed_round, mixed_requests, mixed_stats, round_stats


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.machine()}, {__import__('os').cpu_count()} cores)"


def kv_blocks(args) -> int:
    """A pool for the largest fixed round and for max_num_seqs of the mixed load's longest requests."""
    p_max, o_max = args.mixed_prompt[2], args.mixed_output[2]
    fixed = max(kv_blocks_for(c, args.prompt_len + 64, round_gen(args, c)) for c in args.streams)
    return max(fixed,  # prompts + 64 for a chat template
               kv_blocks_for(args.max_num_seqs, p_max + 64, o_max))


def serve_args(args, name: str) -> list[str]:
    """The engine phase's shape; the model served under `name` (the requests' `model` field)."""
    return ["--served-model-name", name, "--max-num-seqs", str(args.max_num_seqs), "--max-queue", "100000",
            "--num-kv-blocks", str(kv_blocks(args)), *args.serve_arg]


def run_model(args, name: str, path: str, out: Path, deadline: Deadline) -> Iterator[tuple[dict, list, list]]:
    """(run, rows, mixed rows) for each --server, each against the same in-process engine."""
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(path).metadata)
    bench = None
    if not args.skip_engine:
        bench = load_engine_bench(path, args.device, kv_blocks(args), args.max_num_seqs)
        t0 = time.perf_counter()
        for reqs in warm_rounds(args, name, tok):
            bench.run(engine_requests(tok, reqs))
        bench.info["warmup_s"] = time.perf_counter() - t0
        info, pg = bench.info, bench.info.get("prefill_graphs") or {}
        print(f"[{name}] engine start: load {info['load_s']:.2f} s, LLMEngine {info['engine_init_s']:.2f} s "
              f"(prefill graphs: {len(pg.get('buckets', []))} in {pg.get('seconds', 0.0):.2f} s), "
              f"warm-up rounds {info['warmup_s']:.2f} s", flush=True)
    try:
        for tag, repo, extra, own_args in args.servers:
            run = {"tag": tag, "device": device_name(args.device), "model_file": path,
                   "prompt_len": args.prompt_len, "gen_len": args.gen_len,
                   "min_round_tokens": args.min_round_tokens, "client_procs": args.client_procs,
                   "server_repo": str(repo), "server_path": list(extra),
                   "serve_args": serve_args(args, name) + own_args, "engine": bench.info if bench else {}}
            server = ServerProcess(path, args.device, run["serve_args"], out / f"serving-{name}-{tag}.log",
                                   repo=repo, extra_path=extra)
            yield (run, *serve_rounds(args, name, tag, tok, server, bench, run, deadline))
    finally:
        release(bench)


def release(bench: EngineBench | None) -> None:
    if bench is None:
        return
    import gc

    import torch

    bench.engine = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def warm_rounds(args, name: str, tok) -> list[list]:
    """Every route and stream count once, short outputs: Triton, the tokenizer, the HTTP stack warmed.
    (CUDA graphs, decode and prefill, are captured at engine start.)"""
    return [fixed_round(tok, route, c, args.prompt_len, args.warmup_len, name, 10_000 + c)
            for route in args.routes for c in args.streams]


def serve_rounds(args, name: str, tag: str, tok, server: ServerProcess, bench: EngineBench | None, run: dict,
                 deadline: Deadline) -> tuple[list, list]:
    rows: list[dict] = []
    mixed: list[dict] = []
    try:
        run["startup_s"] = server.start(timeout_s=max(60.0, deadline.remaining()))
        t0 = time.perf_counter()
        for reqs in warm_rounds(args, name, tok):
            run_load("127.0.0.1", server.port, reqs, args.client_procs)
        run["http_warmup_s"] = time.perf_counter() - t0
        rows = http_rows(args, name, tag, tok, server.port, bench, deadline)
        if tag in args.mixed_tags:
            mixed = mixed_rows(args, name, tag, tok, server.port, bench, rows, deadline)
    except Exception as err:  # noqa: BLE001 - recorded in the run, the rows measured so far are kept
        traceback.print_exc()
        run["error"] = f"{type(err).__name__}: {err}"[:2000]
    finally:
        server.stop()
    return rows, mixed


LATENCY = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def median_of(tries: list[dict], key: str) -> dict:
    """The try with the median `key` (the lower middle of an even count)."""
    return sorted(tries, key=lambda t: t[key] or 0)[(len(tries) - 1) // 2]


def http_rows(args, name: str, tag: str, tok, port: int, bench: EngineBench | None,
              deadline: Deadline) -> list[dict]:
    rows = []
    for route in args.routes:
        for c in args.streams:
            if deadline.expired():
                print(f"[{name}] {route} C={c}: skipped (time guard)", file=sys.stderr)
                continue
            https, engines, busys = [], [], []
            for k in range(args.repeat):  # fresh prompts each time: no prefix-cache hits across repeats
                reqs = fixed_round(tok, route, c, args.prompt_len, round_gen(args, c), name, c + 7919 * k)
                if bench is not None:
                    engines.append(round_stats(*bench.run(engine_requests(tok, reqs))))
                t0, results, busy = run_load("127.0.0.1", port, reqs, args.client_procs)
                https.append(round_stats(t0, results))
                busys.append(busy)
            rows.append(fixed_row(tag, name, route, c, https, engines, max(busys)))
            r = rows[-1]
            print(f"[{name} {tag}] {route} C={c}: http {r['http_tok_s'] or 0:,.0f} tok/s, engine "
                  f"{r['engine_tok_s'] or 0:,.0f}, ratio {r['http_over_engine'] or 0:.2f} (repeats "
                  f"{r['repeats_ratio']}), TTFT p50 {r['ttft_p50_ms']} ms "
                  f"(engine {r.get('engine_ttft_p50_ms')}), "
                  f"ITL p50 {r['itl_p50_ms']} p99 {r['itl_p99_ms']} ms, client busy {r['client_busy']}",
                  flush=True)
    return rows


def round_gen(args, c: int) -> int:
    """Tokens each request of a C-stream fixed round generates: >= min_round_tokens in the round."""
    return max(args.gen_len, -(-args.min_round_tokens // c))


def fixed_row(tag: str, name: str, route: str, c: int, https: list[dict], engines: list[dict],
              busy: float) -> dict:
    """Medians of the repeats; the ratio is the median of the paired (same prompts, back to back) ratios."""
    http = median_of(https, "http_tok_s")
    row = {"tag": tag, "model": name, "route": route, "streams": c, **http,
           "repeats_http_tok_s": [round(h["http_tok_s"] or 0) for h in https], "client_busy": round(busy, 3),
           "engine_tok_s": None, "http_over_engine": None, "repeats_ratio": None}
    if engines:
        eng = median_of(engines, "http_tok_s")  # round_stats names it http_tok_s: tokens / wall
        ratios = [h["http_tok_s"] / e["http_tok_s"] for h, e in zip(https, engines, strict=True)
                  if h["http_tok_s"] and e["http_tok_s"]]
        row.update(engine_tok_s=eng["http_tok_s"],
                   repeats_engine_tok_s=[round(e["http_tok_s"] or 0) for e in engines],
                   http_over_engine=statistics.median(ratios) if ratios else None,
                   repeats_ratio=[round(x, 3) for x in ratios])
        row.update({f"engine_{k}": eng[k] for k in LATENCY})
    return row


def mixed_rows(args, name: str, tag: str, tok, port: int, bench: EngineBench | None, fixed: list[dict],
               deadline: Deadline) -> list[dict]:
    """Per rate: the engine alone on the Poisson arrivals, then the server on the same requests."""
    tops = [r["engine_tok_s"] or r["http_tok_s"] for r in fixed if r["streams"] == max(args.streams)]
    top = max([t for t in tops if t], default=None)
    if not args.mixed_rates or not top:
        return []
    rows = []
    for route in args.mixed_routes:
        for frac in args.mixed_rates:
            if deadline.expired():
                continue
            rate = frac * top / args.mixed_output[0]  # requests/s; the mean output is above the median
            reqs = mixed_requests(tok, route, rate, args.mixed_seconds, name, seed=int(frac * 1000),
                                  prompt=args.mixed_prompt, output=args.mixed_output)
            sides = []
            if bench is not None:
                t0, results = bench.run(engine_requests(tok, reqs))
                sides.append(("engine", t0, results, 0.0))
            sides.append(("http", *run_load("127.0.0.1", port, reqs, args.client_procs)))
            for side, t0, results, busy in sides:
                stats = mixed_stats(t0, results, rate, args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
                rows.append({"tag": tag, "model": name, "route": route, "side": side, "load": frac, **stats,
                             "client_busy": round(busy, 3)})
                print(f"[{name} {tag}] mixed {route} {side} {rate:.1f} req/s: "
                      f"{stats['output_tok_s'] or 0:,.0f} tok/s, "
                      f"goodput {stats['goodput_req_s'] or 0:.2f} req/s, "
                      f"TTFT p99 {stats['ttft_p99_ms']} ms, ITL p99 {stats['itl_p99_ms']} ms", flush=True)
    return rows
