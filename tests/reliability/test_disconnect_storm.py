"""Disconnect storm (issue 8 item 4) at full size: 200 concurrent streaming clients on loopback against a
real `orcd serve`, half on /v1/generate and half on OpenAI /v1/completions, a fifth of them dropping the
connection after two tokens. Every other stream must end normally with exactly its max_tokens tokens.
Afterwards: no request active, running or waiting, every KV block free (the tiny model has no prefix
cache holding blocks: /health's kv_blocks_used counts blocks owned by live sequences), the server's
disconnect count equals the drops, and its open sockets and threads are back to their count before.
(tests/server/test_storm_and_shutdown.py checks the text of each stream against the request alone.)"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import httpx
import pytest
from live_server import LiveServer, tiny_model

CLIENTS = 200
MAX_TOKENS = 6
DROP_AFTER = 2
ANYIO_WORKERS = 40  # anyio.to_thread's default limiter


def _drops(i: int) -> bool:
    return i % 5 == 0


def _fds_threads(pid: int) -> tuple[int, int]:
    threads = next(int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if ln.startswith("Threads:"))
    return len(os.listdir(f"/proc/{pid}/fd")), threads


@pytest.fixture(scope="module")
def storm_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("storm200")
    srv = LiveServer(tiny_model(tmp / "storm.gguf"), tmp / "serve.log", "--max-num-seqs", "32",
                     "--max-queue", str(CLIENTS), "--ping-interval", "1")
    try:
        srv.wait_ready()
        yield srv
    finally:
        assert srv.stop() == 0, srv.log()


async def _generate(c: httpx.AsyncClient, i: int, drop: bool) -> int | None:
    """Tokens counted on a /v1/generate stream (None: dropped on purpose)."""
    body = {"prompt": f"storm {i}", "max_tokens": 2000 if drop else MAX_TOKENS, "seed": i,
            "ignore_eos": True}
    tokens, event = 0, None
    async with c.stream("POST", "/v1/generate", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "token":
                tokens += json.loads(line[6:])["id"] is not None
                if drop and tokens == DROP_AFTER:
                    return None  # leaving the block closes the connection mid-stream
            elif line.startswith("data: ") and event == "end":
                end = json.loads(line[6:])
                assert end["stop_reason"] == "length" and end["tokens_out"] == tokens, (end, tokens)
                return tokens
    raise AssertionError(f"generate stream {i} closed without an end event")


async def _completion(c: httpx.AsyncClient, i: int, drop: bool, model: str) -> int | None:
    """completion_tokens of an OpenAI completions stream, checked against its chunks' finish."""
    body = {"model": model, "prompt": f"storm {i}", "max_tokens": 2000 if drop else MAX_TOKENS, "seed": i,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks, finish, usage, done = 0, None, None, False
    async with c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                usage = chunk.get("usage") or usage
                for choice in chunk["choices"]:
                    chunks += 1
                    finish = choice.get("finish_reason") or finish
                if drop and chunks == DROP_AFTER:
                    return None
    assert done and finish == "length" and usage is not None, (i, finish, usage, done)
    return usage["completion_tokens"]


async def _storm(url: str, model: str) -> list[int | None]:
    limits = httpx.Limits(max_connections=CLIENTS + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        return await asyncio.gather(*(
            (_generate(c, i, _drops(i)) if i % 2 else _completion(c, i, _drops(i), model))
            for i in range(CLIENTS)))


def _wait_idle(c: httpx.Client, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        h = c.get("/health").json()
        if (h["active_requests"], h["running"], h["waiting"], h["kv_blocks_used"]) == (0, 0, 0, 0):
            return h
        assert time.monotonic() < deadline, f"not idle after the storm: {h}"
        time.sleep(0.05)


def _disconnected(metrics: str) -> float:
    return sum(float(ln.split()[-1]) for ln in metrics.splitlines()
               if ln.startswith("orcd_requests_total{") and 'outcome="disconnected"' in ln)


def _loop_tasks(c: httpx.Client) -> float:
    """The server's own count of asyncio tasks on its event loop (the /metrics scrape included)."""
    lines = [ln for ln in c.get("/metrics").text.splitlines() if ln.startswith("orcd_event_loop_tasks ")]
    return float(lines[0].split()[-1])


def test_200_client_storm_with_drops(storm_server):
    srv = storm_server
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        _wait_idle(c)
        before = _fds_threads(srv.pid)
        tasks_before = _loop_tasks(c)
        results = asyncio.run(_storm(srv.url, srv.model_id))
        health = _wait_idle(c)
        disconnected = _disconnected(c.get("/metrics").text)
        deadline = time.monotonic() + 10  # connection tasks end as their sockets close
        while (tasks_after := _loop_tasks(c)) > tasks_before and time.monotonic() < deadline:
            time.sleep(0.1)
    assert tasks_after <= tasks_before, f"{tasks_after - tasks_before:.0f} asyncio tasks left after the storm"
    for i, n in enumerate(results):
        assert (n is None) if _drops(i) else (n == MAX_TOKENS), (i, n)
    assert disconnected == sum(map(_drops, range(CLIENTS)))
    assert health["status"] == "ok" and health["kv_blocks_total"] > 0
    # the server closes the dropped sockets, and starts no thread per request: at most anyio's pool of
    # 40 tokenizer workers (idle ones exit after 10 s)
    deadline = time.monotonic() + 10
    while (after := _fds_threads(srv.pid))[0] > before[0] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert after[0] <= before[0] and after[1] <= before[1] + ANYIO_WORKERS, (before, after)
    assert "Traceback" not in srv.log()
