"""One model of serving.py: the engine phase, then the HTTP rounds and the mixed load on one server."""

from __future__ import annotations

import platform
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from batching_common import Deadline
from batching_engine import bench_engine, kv_blocks_for
from batching_http import ServerProcess
from serving_client import run_load
from serving_load import fixed_round, mixed_requests, mixed_stats, round_stats


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.machine()}, {__import__('os').cpu_count()} cores)"


def engine_rates(args, path: str, deadline: Deadline) -> tuple[dict[int, float], dict]:
    """{streams: end-to-end tok/s} of the engine alone (every token over first add to last token)."""
    res = bench_engine(path, args.device, args.streams, args.prompt_len, args.gen_len, args.warmup_len,
                       args.max_num_seqs, False, deadline, repeat=args.repeat)
    rates = {int(c): r["e2e_tok_s"] for c, r in res["rounds"].items() if r.get("e2e_tok_s")}
    info = {k: res.get(k) for k in ("load_s", "engine_init_s", "warmup_s", "decode_graphs", "num_kv_blocks")}
    return rates, info


def serve_args(args, name: str) -> list[str]:
    """Same engine shape as the engine phase; a KV pool and queue large enough for the mixed load;
    the model served under `name` (the requests' `model` field)."""
    p_max, o_max = args.mixed_prompt[2], args.mixed_output[2]
    blocks = max(kv_blocks_for(max(args.streams), args.prompt_len, args.gen_len),
                 kv_blocks_for(args.max_num_seqs, p_max, o_max))
    return ["--served-model-name", name, "--max-num-seqs", str(args.max_num_seqs), "--max-queue", "100000",
            "--num-kv-blocks", str(blocks), *args.serve_arg]


def run_model(args, name: str, path: str, out: Path, deadline: Deadline) -> Iterator[tuple[dict, list, list]]:
    """(run, rows, mixed rows) for each --server, against one engine phase."""
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    engine: dict[int, float] = {}
    info: dict = {}
    if not args.skip_engine:
        engine, info = engine_rates(args, path, deadline)
        print(f"[{name}] engine tok/s: " + ", ".join(f"{c}: {v:,.0f}" for c, v in engine.items()), flush=True)
    tok = load_tokenizer(open_gguf(path).metadata)
    for tag, repo, extra, own_args in args.servers:
        run = {"tag": tag, "device": device_name(args.device), "model_file": path,
               "prompt_len": args.prompt_len, "gen_len": args.gen_len, "client_procs": args.client_procs,
               "server_repo": str(repo),
               "server_path": list(extra), "serve_args": serve_args(args, name) + own_args, "engine": info}
        server = ServerProcess(path, args.device, run["serve_args"], out / f"serving-{name}-{tag}.log",
                               repo=repo, extra_path=extra)
        yield (run, *serve_rounds(args, name, tag, tok, server, engine, run, deadline))


def serve_rounds(args, name: str, tag: str, tok, server: ServerProcess, engine: dict[int, float], run: dict,
                 deadline: Deadline) -> tuple[list, list]:
    rows: list[dict] = []
    mixed: list[dict] = []
    try:
        run["startup_s"] = server.start(timeout_s=max(60.0, deadline.remaining()))
        t0 = time.perf_counter()
        # Warm-up: every route and batch shape, twice. The engine captures a prefill CUDA graph the first
        # time a (tokens, sequences) bucket comes up, ~0.1 s each, and which buckets come up depends on
        # how arrivals group: one pass left 1-2 captures per server inside the measured rounds (H100).
        for k in range(2):
            for route in args.routes:
                for c in args.streams:
                    reqs = fixed_round(tok, route, c, args.prompt_len, args.warmup_len, name, 10_000 * k + c)
                    run_load("127.0.0.1", server.port, reqs, args.client_procs)
        run["http_warmup_s"] = time.perf_counter() - t0
        rows = http_rows(args, name, tag, tok, server.port, engine, deadline)
        if tag in args.mixed_tags:
            mixed = mixed_rows(args, name, tag, tok, server.port, engine, deadline)
    except Exception as err:  # noqa: BLE001 - recorded in the run, the rows measured so far are kept
        traceback.print_exc()
        run["error"] = f"{type(err).__name__}: {err}"[:2000]
    finally:
        server.stop()
    return rows, mixed


def http_rows(args, name: str, tag: str, tok, port: int, engine: dict[int, float],
              deadline: Deadline) -> list[dict]:
    rows = []
    for route in args.routes:
        for c in args.streams:
            if deadline.expired():
                print(f"[{name}] {route} C={c}: skipped (time guard)", file=sys.stderr)
                continue
            tries = []
            for k in range(args.repeat):  # fresh prompts each time: no prefix-cache hits across repeats
                reqs = fixed_round(tok, route, c, args.prompt_len, args.gen_len, name, c + 7919 * k)
                t0, results, busy = run_load("127.0.0.1", port, reqs, args.client_procs)
                tries.append((round_stats(t0, results), busy))
            stats, busy = sorted(tries, key=lambda t: t[0]["http_tok_s"] or 0)[len(tries) // 2]
            stats["repeats_http_tok_s"] = [t[0]["http_tok_s"] for t in tries]
            eng = engine.get(c)
            ratio = stats["http_tok_s"] / eng if eng and stats["http_tok_s"] else None
            rows.append({"tag": tag, "model": name, "route": route, "streams": c, "engine_tok_s": eng,
                         **stats, "http_over_engine": ratio, "client_busy": round(busy, 3)})
            print(f"[{name} {tag}] {route} C={c}: http {stats['http_tok_s'] or 0:,.0f} tok/s, engine "
                  f"{eng or 0:,.0f}, ratio {ratio or 0:.2f}, TTFT p50 {stats['ttft_p50_ms']} ms, ITL p50 "
                  f"{stats['itl_p50_ms']} p99 {stats['itl_p99_ms']} ms, client busy {busy:.2f}", flush=True)
    return rows


def mixed_rows(args, name: str, tag: str, tok, port: int, engine: dict[int, float],
               deadline: Deadline) -> list[dict]:
    top = engine.get(max(args.streams)) if engine else None
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
            t0, results, busy = run_load("127.0.0.1", port, reqs, args.client_procs)
            stats = mixed_stats(t0, results, rate, args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
            rows.append({"tag": tag, "model": name, "route": route, "load": frac, **stats,
                         "client_busy": round(busy, 3)})
            print(f"[{name} {tag}] mixed {route} {rate:.1f} req/s: {stats['output_tok_s'] or 0:,.0f} tok/s, "
                  f"goodput {stats['goodput_req_s'] or 0:.2f} req/s, TTFT p99 {stats['ttft_p99_ms']} ms, "
                  f"ITL p99 {stats['itl_p99_ms']} ms", flush=True)
    return rows
