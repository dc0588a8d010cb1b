"""CPU cost of the HTTP layer per token and per request, by thread, on any machine (issue 19).

Wall-clock ratios on a shared CPU box move with its load; CPU time spent by the server's event-loop
thread does not. This runs `orcd serve` children (each --server, as in serving.py), streams a fixed load
through them with serving_client.py, and reads every server thread's CPU time from /proc before and
after: the main thread is uvicorn's event loop (HTTP parsing, routes, SSE framing, socket writes), the
rest is the engine thread, tokenizer worker threads and torch's. Two loads per route: `tokens` (C
streams x gen_len tokens) and `requests` (C x n_requests requests of one token: the per-request cost).
Each pair of loads runs --runs times; the tables give the median and the range (the box is shared, and
/proc counts CPU in 10 ms ticks). `all threads µs / request` is the whole process's CPU per one-token
request, so that work moved off or onto the loop thread shows. Writes OUT/loop_cost.json and
OUT/loop_cost.md. Linux only (/proc).

Usage: python bench/serving/loop_cost.py [--model F.gguf] --server before=OLD --server after=.
       python bench/serving/loop_cost.py --prep     # CPU per call of the request-preparation paths only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batching_http import ServerProcess  # noqa: E402
from serving import _server  # noqa: E402
from serving_client import run_load  # noqa: E402
from serving_load import fixed_round  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def thread_cpu(pid: int) -> dict[int, float]:
    """{thread id: user + system CPU seconds} of every thread of `pid` and of its child processes (the
    engine process of `orcd serve --engine-process`)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
        for child in children:
            out.update(thread_cpu(int(child)) if Path(f"/proc/{child}").exists() else {})
    return out


def measure(server: ServerProcess, reqs: list, procs: int) -> dict:
    pid = server.proc.pid
    before = thread_cpu(pid)
    _, results, _ = run_load("127.0.0.1", server.port, reqs, procs)
    after = thread_cpu(pid)
    loop = after.get(pid, 0.0) - before.get(pid, 0.0)
    rest = sum(after.values()) - sum(before.values()) - loop
    tokens = sum(r.tokens for r in results)
    return {"requests": len(reqs), "tokens": tokens, "errors": sum(bool(r.error) for r in results),
            "loop_cpu_s": round(loop, 3), "other_threads_cpu_s": round(rest, 3)}


def one_run(args, server: ServerProcess, tok, route: str, k: int) -> dict:
    """One tokens load and one requests load; per-request and per-token loop CPU from them."""
    tok_load = [r for j in range(args.repeat) for r in fixed_round(
        tok, route, args.streams, args.prompt_len, args.gen_len, args.name, 1000 + 10 * k + j)]
    req_load = fixed_round(tok, route, args.streams * args.n_requests, args.prompt_len, 1, args.name, 7 + k)
    t, q = measure(server, tok_load, args.client_procs), measure(server, req_load, args.client_procs)
    per_req = q["loop_cpu_s"] / max(1, q["requests"])
    per_tok = (t["loop_cpu_s"] - per_req * t["requests"]) / max(1, t["tokens"])
    all_req = (q["loop_cpu_s"] + q["other_threads_cpu_s"]) / max(1, q["requests"])
    return {"tokens_load": t, "requests_load": q, "loop_us_per_request": round(per_req * 1e6, 1),
            "loop_us_per_token": round(per_tok * 1e6, 1), "all_us_per_request": round(all_req * 1e6, 1)}


def summary(runs: list[dict], key: str) -> dict:
    values = sorted(r[key] for r in runs)
    return {"median": values[len(values) // 2], "min": values[0], "max": values[-1]}


def run_server(args, tag: str, repo: Path, extra: tuple, own: list, tok, out: Path) -> list[dict]:
    serve = ["--served-model-name", args.name, "--max-num-seqs", str(args.streams), "--max-queue", "100000",
             *own]
    server = ServerProcess(args.model, args.device, serve, out / f"loop_cost-{tag}.log", repo=repo,
                           extra_path=extra)
    rows = []
    try:
        server.start(timeout_s=300)
        for route in args.routes:
            run_load("127.0.0.1", server.port, fixed_round(tok, route, args.streams, args.prompt_len, 4,
                                                           args.name, 99), args.client_procs)  # warm-up
            runs = [one_run(args, server, tok, route, k) for k in range(args.runs)]
            row = {"tag": tag, "route": route, "runs": runs, "serve_args": serve,
                   **{key: summary(runs, key) for key in ("loop_us_per_request", "loop_us_per_token",
                                                          "all_us_per_request")}}
            rows.append(row)
            print(f"[{tag}] {route}: loop {_cell(row['loop_us_per_token'], 1)} us/token, "
                  f"{_cell(row['loop_us_per_request'])} us/request, all threads "
                  f"{_cell(row['all_us_per_request'])} us/request", flush=True)
    finally:
        server.stop()
    return rows


async def _cpu_per_call(make, n: int) -> tuple[float, float, float]:
    """CPU µs (every thread of this process) per call of make(), awaited if it returns an awaitable:
    median, min, max of 5 passes of n calls."""
    per = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(n):
            r = make()
            if asyncio.isfuture(r) or asyncio.iscoroutine(r):
                await r
        per.append((time.process_time() - t) / n * 1e6)
    return statistics.median(per), min(per), max(per)


async def prep_costs(tok) -> list[str]:
    """Before/after pairs of what orcd.server.prep and metrics changed: the thread hop, and labels()."""
    from anyio import to_thread
    from prometheus_client import CollectorRegistry, Counter

    text = "hello there this is a prompt of about sixteen tokens or so okay"
    msgs = [{"role": "user", "content": text}]
    loop = asyncio.get_running_loop()
    counter = Counter("x", "x", ["route", "outcome"], registry=CollectorRegistry())
    child = counter.labels("generate", "stop")
    paths = [("encode_prompt, 16-token prompt, through anyio to_thread (before)",
              lambda: to_thread.run_sync(tok.encode_prompt, text), 2000),
             ("encode_prompt inline on the loop (after: prompts of <= 1024 characters)",
              lambda: tok.encode_prompt(text), 2000),
             ("encode_chat, one message, through anyio to_thread (before)",
              lambda: to_thread.run_sync(tok.encode_chat, msgs), 500),
             ("encode_chat, one message, through loop.run_in_executor (tried, not kept)",
              lambda: loop.run_in_executor(None, tok.encode_chat, msgs), 500),
             ("Counter.labels(route, outcome).inc() (before)",
              lambda: counter.labels("generate", "stop").inc(), 20000),
             ("the cached child's .inc() (after)", lambda: child.inc(), 20000)]
    lines = ["| path | CPU µs / call, median of 5 (range) |", "|---|---|"]
    for name, make, n in paths:
        med, lo, hi = await _cpu_per_call(make, n)
        lines.append(f"| {name} | {med:.1f} ({lo:.1f}–{hi:.1f}) |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(REPO / "orcd/assets/demo.gguf"))
    ap.add_argument("--name", default="m", help="the model's name on the server")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--routes", default="generate,chat")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2, help="token rounds per measurement (sent together)")
    ap.add_argument("--n-requests", type=int, default=16, help="one-token requests per stream")
    ap.add_argument("--runs", type=int, default=3, help="measurements per server and route (median, range)")
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--server", action="append", default=None, metavar="'TAG=CHECKOUT[@PATH] [ARG...]'")
    ap.add_argument("--out-dir", default="/tmp/orcd-loop-cost")
    ap.add_argument("--prep", action="store_true", help="only the request-preparation microbenchmark")
    args = ap.parse_args(argv)
    args.routes = [r for r in args.routes.split(",") if r]
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(args.model).metadata)
    if args.prep:
        print("\n".join(asyncio.run(prep_costs(tok))))
        return 0
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.server or [f"after={REPO}"]:
        rows += run_server(args, *_server(spec), tok, out)
    (out / "loop_cost.json").write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "rows": rows},
                                                   indent=1))
    lines = ["| server | route | loop µs / token | loop µs / request | all threads µs / request | runs |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['tag']} | {r['route']} | {_cell(r['loop_us_per_token'], 1)} | "
              f"{_cell(r['loop_us_per_request'])} | {_cell(r['all_us_per_request'])} | {len(r['runs'])} |"
              for r in rows]
    (out / "loop_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    loads = [k[load] for r in rows for k in r["runs"] for load in ("tokens_load", "requests_load")]
    return 1 if any(load["errors"] for load in loads) else 0


def _cell(s: dict, digits: int = 0) -> str:
    """median (min–max)"""
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}–{s['max']:,.{digits}f})"


if __name__ == "__main__":
    sys.exit(main())
