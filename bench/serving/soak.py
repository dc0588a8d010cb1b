"""Soak benchmark (issue 8 item 8): minutes of mixed load against a real `orcd serve` on the CPU build.

    python bench/serving/soak.py [--minutes 10] [--clients 12] [--out bench/results/soak]

Starts `orcd serve` on a tiny random-weight qwen2 GGUF (loopback, free port, CPU) and runs `--clients`
concurrent loops, each picking at random: /v1/generate streamed or not, OpenAI chat (streamed) and
completions (not), a stream dropped after two tokens, and bad requests (out-of-range field, broken JSON,
unknown model). Every answer is checked: a stream must end with `end` whose tokens_out equals the tokens
seen (or `[DONE]` after a finish_reason), a bad request must get its 4xx. The server's RSS (VmRSS from
/proc) and /health are sampled every `--sample-s` seconds. Writes OUT.json and OUT.md; exits 1 if any
request got an unexpected answer, or the server is not idle (no active request, no KV block held) after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests" / d) for d in ("reliability", "")]
from live_server import LiveServer, rss_bytes, tiny_model  # noqa: E402

KINDS = ("gen_stream", "gen_json", "chat_stream", "completion_json", "drop_stream", "bad_field",
         "bad_json", "bad_model")
WEIGHTS = (25, 15, 20, 15, 10, 5, 5, 5)


class Unexpected(Exception):
    pass


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise Unexpected(what)


async def _gen_stream(c: httpx.AsyncClient, rng: random.Random, drop: bool) -> str:
    body = {"prompt": f"soak {rng.random()}", "max_tokens": 500 if drop else rng.randint(4, 24),
            "seed": rng.randint(0, 2**31), "ignore_eos": True, "stream": True}
    tokens, event = 0, None
    async with c.stream("POST", "/v1/generate", json=body) as r:
        if r.status_code == 503:
            return "overloaded"
        _check(r.status_code == 200, f"generate stream status {r.status_code}")
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "token":
                tokens += json.loads(line[6:])["id"] is not None
                if drop and tokens == 2:
                    return "dropped"  # leaving the block closes the connection mid-stream
            elif line.startswith("data: ") and event == "end":
                end = json.loads(line[6:])
                _check(end["stop_reason"] == "length" and end["tokens_out"] == tokens == body["max_tokens"],
                       f"stream end {end} after {tokens} tokens")
                return "ok"
            elif event == "error":
                raise Unexpected(f"error event {line}")
    raise Unexpected("stream closed without an end event")


async def _gen_json(c: httpx.AsyncClient, rng: random.Random) -> str:
    n = rng.randint(4, 24)
    r = await c.post("/v1/generate", json={"prompt": "soak json", "max_tokens": n, "ignore_eos": True,
                                           "stream": False, "seed": rng.randint(0, 99)})
    if r.status_code == 503:
        return "overloaded"
    _check(r.status_code == 200 and r.json()["tokens_out"] == n == len(r.json()["token_ids"]),
           f"generate json {r.status_code} {r.text[:200]}")
    return "ok"


async def _chat_stream(c: httpx.AsyncClient, rng: random.Random, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": f"hi {rng.random()}"}],
            "max_tokens": rng.randint(4, 24), "stream": True, "seed": rng.randint(0, 99)}
    finish, done = None, False
    async with c.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code == 503:
            return "overloaded"
        _check(r.status_code == 200, f"chat stream status {r.status_code}")
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                _check("error" not in chunk, f"chat error chunk {line}")
                finish = chunk["choices"][0].get("finish_reason") or finish if chunk["choices"] else finish
    _check(done and finish in ("stop", "length"), f"chat stream ended without finish/[DONE] ({finish})")
    return "ok"


async def _completion_json(c: httpx.AsyncClient, rng: random.Random, model: str) -> str:
    n = rng.randint(4, 24)
    r = await c.post("/v1/completions", json={"model": model, "prompt": "soak", "max_tokens": n,
                                              "ignore_eos": True})
    if r.status_code == 503:
        return "overloaded"
    _check(r.status_code == 200 and r.json()["usage"]["completion_tokens"] == n,
           f"completions {r.status_code} {r.text[:200]}")
    return "ok"


async def _bad(c: httpx.AsyncClient, kind: str, model: str) -> str:
    if kind == "bad_field":
        r = await c.post("/v1/generate", json={"prompt": "x", "temperature": -3, "stream": False})
        want = 400
    elif kind == "bad_json":
        r = await c.post("/v1/chat/completions", content=b'{"model": [[[', headers={
            "content-type": "application/json"})
        want = 400
    else:
        r = await c.post("/v1/completions", json={"model": model + "-nope", "prompt": "x"})
        want = 404
    _check(r.status_code == want and "message" in r.json()["error"],
           f"{kind}: {r.status_code} {r.text[:200]}")
    return "rejected_as_expected"


async def _one(c: httpx.AsyncClient, rng: random.Random, kind: str, model: str) -> str:
    if kind in ("gen_stream", "drop_stream"):
        return await _gen_stream(c, rng, drop=kind == "drop_stream")
    if kind == "gen_json":
        return await _gen_json(c, rng)
    if kind == "chat_stream":
        return await _chat_stream(c, rng, model)
    if kind == "completion_json":
        return await _completion_json(c, rng, model)
    return await _bad(c, kind, model)


async def _worker(c, rng, deadline, model, counts: Counter, errors: list) -> None:
    while time.monotonic() < deadline:
        kind = rng.choices(KINDS, WEIGHTS)[0]
        try:
            outcome = await asyncio.wait_for(_one(c, rng, kind, model), timeout=120)
        except (Unexpected, httpx.HTTPError, asyncio.TimeoutError, KeyError, ValueError) as err:
            outcome = "unexpected"
            if len(errors) < 50:
                errors.append(f"{kind}: {type(err).__name__}: {err}"[:300])
        counts[f"{kind}:{outcome}"] += 1


async def _sampler(srv: LiveServer, c: httpx.AsyncClient, t0: float, every: float, samples: list,
                   stop: asyncio.Event) -> None:
    while not stop.is_set():
        h = (await c.get("/health")).json()
        samples.append({"t_s": round(time.monotonic() - t0, 1),
                        "rss_mib": round(rss_bytes(srv.pid) / 2**20, 1), "active": h["active_requests"],
                        "kv_blocks_used": h["kv_blocks_used"]})
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


async def soak(srv: LiveServer, minutes: float, clients: int, every: float, seed: int) -> dict:
    counts: Counter = Counter()
    errors: list[str] = []
    samples: list[dict] = []
    model = srv.model_id
    t0 = time.monotonic()
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as c:
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sampler(srv, c, t0, every, samples, stop))
        deadline = t0 + minutes * 60
        await asyncio.gather(*(_worker(c, random.Random(seed * 1000 + i), deadline, model, counts, errors)
                               for i in range(clients)))
        idle = await srv.wait_idle_async(c)
        stop.set()
        await sampler
        metrics = (await c.get("/metrics")).text
    return {"counts": dict(sorted(counts.items())), "errors": errors, "samples": samples, "idle_after": idle,
            "duration_s": round(time.monotonic() - t0, 1),
            "server_requests_total": {ln.split("{", 1)[1].split("}")[0]: float(ln.split()[-1])
                                      for ln in metrics.splitlines()
                                      if ln.startswith("orcd_requests_total{")}}


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def summarize(res: dict, args: argparse.Namespace) -> dict:
    rss = [s["rss_mib"] for s in res["samples"]]
    after_1min = [s["rss_mib"] for s in res["samples"] if s["t_s"] >= 60] or rss
    by_outcome = Counter()
    for key, n in res["counts"].items():
        by_outcome[key.split(":")[1]] += n
    ok = by_outcome["unexpected"] == 0 and res["idle_after"]["ok"]
    late = [x for x in res["samples"] if x["t_s"] >= 60] or res["samples"]
    slope = _slope([x["t_s"] / 60 for x in late], [x["rss_mib"] for x in late])
    return {"minutes": args.minutes, "clients": args.clients, "duration_s": res["duration_s"],
            "requests": sum(res["counts"].values()), "by_outcome": dict(by_outcome), "by_kind": res["counts"],
            "rss_mib": {"first": rss[0], "at_1min": after_1min[0], "last": rss[-1], "max": max(rss),
                        "min": min(rss), "slope_after_1min_mib_per_min": round(slope, 3)},
            "idle_after": res["idle_after"], "server_requests_total": res["server_requests_total"],
            "errors": res["errors"], "samples": res["samples"], "pass": ok}


def write_md(s: dict, path: Path, machine: str) -> None:
    r = s["rss_mib"]
    lines = [f"# Soak: {s['minutes']} min of mixed load, {s['clients']} concurrent clients, CPU build", "",
             f"Machine: {machine}. Command: `python bench/serving/soak.py --minutes {s['minutes']} "
             f"--clients {s['clients']}`. Result: **{'PASS' if s['pass'] else 'FAIL'}**.", "",
             f"- requests: {s['requests']} in {s['duration_s']} s",
             f"- by outcome: {s['by_outcome']}",
             f"- server RSS (MiB): first {r['first']}, at 1 min {r['at_1min']}, last {r['last']}, "
             f"max {r['max']}, min {r['min']}; least-squares slope after the first minute "
             f"{r['slope_after_1min_mib_per_min']} MiB/min",
             f"- after the load: {s['idle_after']}", f"- unexpected answers: {len(s['errors'])}", "",
             "| kind:outcome | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["by_kind"].items()]
    lines += ["", "Errors:" if s["errors"] else "No errors.", *(f"- {e}" for e in s["errors"])]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=12)
    p.add_argument("--sample-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/soak")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="orcd-soak-"))
    srv = LiveServer(tiny_model(tmp / "soak-qwen2.gguf"), tmp / "serve.log", "--max-num-seqs", "8",
                     "--max-queue", "32")
    try:
        srv.wait_ready()
        res = asyncio.run(soak(srv, args.minutes, args.clients, args.sample_s, args.seed))
    finally:
        code = srv.stop()
    s = summarize(res, args)
    s["server_exit_code"] = code
    s["pass"] = s["pass"] and code == 0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(s, indent=1) + "\n")
    import os
    import platform

    write_md(s, out.with_suffix(".md"), f"{platform.machine()}, {os.cpu_count()} CPU cores, "
             f"Python {platform.python_version()}")
    print(json.dumps({k: v for k, v in s.items() if k not in ("samples", "by_kind")}, indent=1))
    return 0 if s["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
