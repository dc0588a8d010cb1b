"""A failure inside one request's generation reaches the client in each protocol's own error form.

The real engine cannot be made to fail on demand, so a small stand-in engine (this file only) drives the
app, served by uvicorn on loopback like the real thing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import types

import httpx
import openai
import pytest
import uvicorn
from server_helpers import free_port, generate_events, sse_blocks

from orcd.engine.io import TokenEvent
from orcd.server import ServerSettings, create_app


class _Tokenizer:
    bos_id, has_chat_template = None, True

    def encode_prompt(self, text):
        return [b % 200 + 1 for b in text.encode()]

    def encode_chat(self, messages):
        return self.encode_prompt("".join(m["content"] for m in messages))

    def decode(self, ids, skip_special=False):
        return "".join(chr(96 + i % 26) for i in ids)


class FailingEngine:
    """Streams two tokens, then ends the request with an error event (like a failed model step)."""

    model_name, architecture, device = "failing", "stand-in", "cpu"

    def __init__(self):
        self.tokenizer = _Tokenizer()
        self.config = types.SimpleNamespace(context_length=256, vocab_size=256)

    def start(self):
        pass

    def shutdown(self):
        pass

    def cancel(self, request_id):
        return False

    def stats(self):
        return {"max_num_seqs": 4, "max_model_len": 256, "kv_blocks_used": 0, "kv_blocks_total": 8}

    def generate(self, req):
        async def events():
            for i in range(2):
                await asyncio.sleep(0)
                yield TokenEvent(req.request_id, 100 + i, "ab"[i], i)
            yield TokenEvent(req.request_id, None, "", 2, finished=True, finish_reason="error",
                             error="CUDA out of memory in step")
        return events()


@pytest.fixture(scope="module")
def failing_server():
    app = create_app(FailingEngine(), ServerSettings(warmup=False))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    yield f"http://127.0.0.1:{server.config.port}"
    server.should_exit = True
    thread.join(10)


def test_generate_stream_ends_with_error_event(failing_server):
    with httpx.stream("POST", failing_server + "/v1/generate", json={"prompt": "hi"}) as r:
        events = list(generate_events(r))
    assert [e for e, _ in events] == ["started", "token", "token", "error"]
    assert events[-1][1] == {"code": "generation_failed", "message": "CUDA out of memory in step"}


def test_openai_stream_error_is_a_data_error_object(failing_server):
    body = {"model": "failing", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", failing_server + "/v1/chat/completions", json=body) as r:
        data = [d for e, d in sse_blocks(r) if e != "comment"]
    assert data[-1] == "[DONE]"
    err = json.loads(data[-2])["error"]
    assert err["message"] == "CUDA out of memory in step" and err["code"] == "generation_failed"
    client = openai.OpenAI(base_url=failing_server + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="failing", messages=body["messages"], stream=True):
            pass


def test_non_stream_failure_is_500_in_the_envelope(failing_server):
    r = httpx.post(failing_server + "/v1/completions", json={"model": "failing", "prompt": "hi"})
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "generation_failed"
    assert httpx.get(failing_server + "/health").json()["active_requests"] == 0


def test_health_is_503_loading_before_startup():
    app = create_app(FailingEngine(), ServerSettings(warmup=False))

    async def probe():
        transport = httpx.ASGITransport(app=app)  # no lifespan: the app has not finished starting
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await c.get("/health")

    r = asyncio.run(probe())
    assert r.status_code == 503 and r.json()["status"] == "loading"


def test_cors_allowlist_only():
    app = create_app(FailingEngine(), ServerSettings(warmup=False, api_key="k",
                                                     cors_origins=("https://ok.example",)))
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}

    async def probe(origin: str):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await c.options("/v1/generate", headers={"Origin": origin, **preflight})

    ok, evil = asyncio.run(probe("https://ok.example")), asyncio.run(probe("https://evil.example"))
    assert ok.headers["access-control-allow-origin"] == "https://ok.example"
    assert "access-control-allow-origin" not in evil.headers
