"""Disconnect storm (issue 8): many concurrent streams on loopback, a fifth of them dropping mid-stream.
Every other stream completes with the same text as the same seeded request alone; afterwards no request
is active and every KV block is free. ORCD_STORM_CLIENTS=200 runs the full-size storm."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest
from server_helpers import LONG, ServerProc, metric, wait_idle

CLIENTS = int(os.environ.get("ORCD_STORM_CLIENTS", "40"))
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def storm_server(tiny_model, tmp_path_factory):
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("storm") / "storm.log", "--max-num-seqs", "16",
                     "--max-queue", str(CLIENTS), "--no-warmup", api_key=None)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _body(i: int, stream: bool, max_tokens: int = MAX_TOKENS) -> dict:
    return {"prompt": f"storm request {i}", "max_tokens": max_tokens, "seed": i, "temperature": 0.9,
            "ignore_eos": True, "stream": stream}


async def _client(c: httpx.AsyncClient, i: int, drop: bool) -> str | None:
    text = []
    # Droppers ask for far more tokens than they read: only a noticed disconnect can end them early.
    async with c.stream("POST", "/v1/generate", json=_body(i, True, LONG if drop else MAX_TOKENS)) as r:
        assert r.status_code == 200
        event = None
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "token":
                text.append(json.loads(line[6:])["t"])
                if drop and len(text) == 2:
                    return None  # leaving the block drops the connection mid-stream
            elif line.startswith("data: ") and event == "end":
                assert '"stop_reason":"length"' in line
    return "".join(text)


async def _storm(url: str) -> list[str | None]:
    limits = httpx.Limits(max_connections=CLIENTS + 8)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        return await asyncio.gather(*(_client(c, i, drop=i % 5 == 0) for i in range(CLIENTS)))


def test_disconnect_storm(storm_server):
    results = asyncio.run(_storm(storm_server.url))
    with httpx.Client(base_url=storm_server.url, timeout=60) as c:
        wait_idle(c)
        for i, text in enumerate(results):
            if i % 5:
                alone = c.post("/v1/generate", json=_body(i, False)).json()["text"]
                assert text == alone, f"request {i} differs from the same request alone"
        metrics = c.get("/metrics").text
        assert metric(metrics, 'orcd_requests_total{outcome="disconnected",route="generate"}') == CLIENTS // 5
        health = c.get("/health").json()
    assert health["active_requests"] == 0 and health["kv_blocks_used"] == 0 and health["waiting"] == 0
