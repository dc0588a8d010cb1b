"""Through HTTP: `orcd serve` in a child process, C concurrent streaming POST /v1/generate requests."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from batching_common import Deadline, prompt_texts, split_phases

REPO = Path(__file__).resolve().parents[2]
SERVE = "import sys; from orcd.cli.main import main; sys.exit(main())"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`orcd serve` on a free loopback port; ready once /health says 200 (model loaded, warm-up run)."""

    def __init__(self, model: str, device: str, args: list[str], log_path: Path, repo: Path = REPO,
                 extra_path: tuple[str, ...] = ()):
        self.repo = repo  # the checkout whose `orcd` runs (serving.py --server: an older commit too)
        self.extra_path = extra_path  # more PYTHONPATH entries of this server only (optional packages)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-c", SERVE, "serve", "--model", model, "--device", device,
                    "--port", str(self.port), "--shutdown-grace", "1", "--log-level", "warning", *args]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> float:
        """Start and wait until ready; returns seconds from spawn to ready."""
        import httpx

        paths = [str(self.repo), *self.extra_path, os.environ.get("PYTHONPATH")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, cwd=self.repo, env=env, stdout=self.log_path.open("wb"),
                                     stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orcd serve exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"orcd serve not ready after {timeout_s:.0f} s: {self.log_tail()}")

    def log_tail(self, n: int = 1500) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def stream_one(client, body: dict) -> dict:
    """One streaming request: arrival time of each token event, the `end` fields (or the error)."""
    stamps: list[float] = []
    end: dict | None = None
    started: dict = {}
    error = None
    async with client.stream("POST", "/v1/generate", json=body) as r:
        if r.status_code != 200:
            return {"stamps": [], "error": f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"}
        event = None
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "token":
                if '"id":null' not in line:  # a final held-back-text event has id null (no JSON parse:
                    stamps.append(time.perf_counter())  # the client must keep up with 10k+ events/s)
            elif line.startswith("data:") and event == "started":
                started = json.loads(line[5:])
            elif line.startswith("data:") and event == "end":
                end = json.loads(line[5:])
            elif line.startswith("data:") and event == "error":
                error = line[5:].strip()[:300]
            elif not line:
                event = None
    end = None if end is None else {**end, "prompt_tokens": started.get("prompt_tokens")}
    return {"stamps": stamps, "end": end, "t_end": time.perf_counter(), "error": error}


async def http_round(url: str, texts: list[str], gen_len: int, deadline: Deadline) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=len(texts) + 4, max_keepalive_connections=len(texts) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(None), limits=limits) as client:
        bodies = [{"prompt": t, "max_tokens": gen_len, "temperature": 0, "ignore_eos": True, "stream": True}
                  for t in texts]
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(stream_one(client, b)) for b in bodies]
        done, pending = await asyncio.wait(tasks, timeout=max(1.0, deadline.remaining()))
        for task in pending:  # time guard: closing the streams cancels the requests server-side
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    reqs = [t.result() for t in done if not t.cancelled() and t.exception() is None]
    firsts = [r["stamps"][0] for r in reqs if r["stamps"]]
    stamps = [(s, 1) for r in reqs for s in r["stamps"]]
    t_end = max((r["t_end"] for r in reqs), default=time.perf_counter())
    res = split_phases(t0, firsts, stamps, t_end)
    tokens_out = sum((r["end"] or {}).get("tokens_out", 0) for r in reqs)
    res.update(concurrency=len(texts), tokens_out=tokens_out, truncated=bool(pending),
               tok_s=tokens_out / res["wall_s"] if res["wall_s"] > 0 else None,
               prompt_tokens=sorted({(r["end"] or {}).get("prompt_tokens") or -1 for r in reqs})[:4],
               stop_reasons=sorted({(r["end"] or {}).get("stop_reason") or "none" for r in reqs}),
               errors=[r["error"] for r in reqs if r["error"]][:3],
               # the server's own per-stream decode rates (end.tokens_per_s), summed: a cross-check that
               # the client (one Python event loop) is not what limits the figure above
               server_tok_s_sum=sum((r["end"] or {}).get("tokens_per_s") or 0 for r in reqs))
    return res


def bench_http(path: str, device: str, concurrency: list[int], prompt_len: int, gen_len: int,
               warmup_len: int, serve_args: list[str], log_path: Path, deadline: Deadline) -> dict:
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(path).metadata)
    server = ServerProcess(path, device, serve_args, log_path)
    out: dict = {"serve_args": serve_args, "rounds": {}, "server_log": str(log_path)}
    try:
        out["startup_s"] = server.start(timeout_s=max(30.0, deadline.remaining()))
        t0 = time.perf_counter()
        for c in concurrency:  # warm-up of the server process: every batch shape once
            asyncio.run(http_round(server.url, prompt_texts(tok, c, prompt_len, 10_000 + c), warmup_len,
                                   deadline))
        out["warmup_s"] = time.perf_counter() - t0
        for c in concurrency:
            if deadline.expired():
                out["rounds"][str(c)] = {"skipped": "time guard (--max-seconds)"}
                continue
            res = asyncio.run(http_round(server.url, prompt_texts(tok, c, prompt_len, c), gen_len, deadline))
            out["rounds"][str(c)] = res
            print(f"http C={c}: {res['tok_s'] or 0:,.0f} tok/s (decode phase "
                  f"{res['decode_tok_s'] or 0:,.0f}), wall {res['wall_s']:.2f} s", flush=True)
    except RuntimeError as err:
        out["error"] = str(err)[:2000]
        print(f"http phase failed: {str(err)[:500]}", file=sys.stderr)
    finally:
        server.stop()
    return out
