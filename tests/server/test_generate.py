"""/v1/generate against a real `orcd serve`: event order and fields, incremental streaming, stream:false,
equality with `orcd generate`, cancellation both ways freeing the KV cache, pings, overload."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import subprocess
import sys
import time

import httpx
from server_helpers import LONG, generate_events, metric, wait_idle

PROMPT = "The quick brown fox"


def _stream(client: httpx.Client, **body) -> list[tuple[str, dict]]:
    with client.stream("POST", "/v1/generate", json={"prompt": PROMPT, **body}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(generate_events(r))


def test_event_order_and_fields(client, server):
    events = _stream(client, max_tokens=12, seed=7, temperature=0.8, ignore_eos=True, request_id="order-1")
    names = [e for e, _ in events]
    assert names == ["started"] + ["token"] * 12 + ["end"]
    started, end = events[0][1], events[-1][1]
    assert started["request_id"] == "order-1" and started["model"] == "tiny-qwen2"
    assert started["prompt_tokens"] > 0
    tokens = [d for e, d in events if e == "token"]
    assert [t["i"] for t in tokens] == list(range(12))
    assert all(isinstance(t["id"], int) and 0 <= t["id"] < 320 and isinstance(t["t"], str) for t in tokens)
    assert end["request_id"] == "order-1" and end["tokens_out"] == 12 and end["stop_reason"] == "length"
    assert end["ttft_ms"] > 0 and end["tokens_per_s"] > 0
    assert set(end) == {"request_id", "tokens_out", "stop_reason", "ttft_ms", "tokens_per_s"}


def test_stream_false_matches_stream(client):
    body = {"prompt": PROMPT, "max_tokens": 20, "seed": 11, "temperature": 0.9, "top_k": 40, "top_p": 0.95,
            "ignore_eos": True}
    events = _stream(client, **{k: v for k, v in body.items() if k != "prompt"})
    streamed = "".join(d["t"] for e, d in events if e == "token")
    ids = [d["id"] for e, d in events if e == "token"]
    r = client.post("/v1/generate", json={**body, "stream": False})
    assert r.status_code == 200
    out = r.json()
    assert out["text"] == streamed and out["token_ids"] == ids
    assert out["tokens_out"] == 20 and out["stop_reason"] == "length"
    assert out["prompt_tokens"] == events[0][1]["prompt_tokens"]


def test_stop_string_ends_with_stop(client):
    full = client.post("/v1/generate", json={"prompt": PROMPT, "max_tokens": 24, "seed": 5, "stream": False,
                                             "ignore_eos": True}).json()["text"]
    stop = full[6:9]
    assert len(stop) == 3
    out = client.post("/v1/generate", json={"prompt": PROMPT, "max_tokens": 24, "seed": 5, "stream": False,
                                            "ignore_eos": True, "stop": [stop]}).json()
    assert out["stop_reason"] == "stop"
    assert out["text"] == full[: full.find(stop)]


def test_first_token_arrives_while_running_then_cancel(client, server):
    """Incremental: the first token event is read while the request is still running; POST /v1/cancel then
    ends the stream with stop_reason cancelled and frees the sequence's KV blocks."""
    with client.stream("POST", "/v1/generate", json={"prompt": PROMPT, "max_tokens": LONG, "ignore_eos": True,
                                                     "request_id": "cancel-me"}) as r:
        it = generate_events(r)
        assert next(it)[0] == "started"
        assert next(it)[0] == "token"
        with httpx.Client(base_url=server.url, headers=server.headers) as other:
            health = other.get("/health").json()
            assert health["active_requests"] == 1 and health["kv_blocks_used"] > 0
            c = other.post("/v1/cancel", json={"request_id": "cancel-me"})
            assert c.status_code == 200 and c.json() == {"request_id": "cancel-me", "cancelled": True}
        rest = list(it)
    assert rest[-1][0] == "end"
    assert rest[-1][1]["stop_reason"] == "cancelled"
    assert rest[-1][1]["tokens_out"] < LONG
    assert wait_idle(client)["kv_blocks_used"] == 0


def test_disconnect_cancels_and_frees(client, server):
    before = client.get("/metrics").text
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
        with c.stream("POST", "/v1/generate", json={"prompt": PROMPT, "max_tokens": LONG,
                                                    "ignore_eos": True}) as r:
            it = generate_events(r)
            assert next(it)[0] == "started"
            assert next(it)[0] == "token"
            assert client.get("/health").json()["running"] == 1
        # leaving the block closes the connection mid-stream
    assert wait_idle(client)["active_requests"] == 0
    after = client.get("/metrics").text
    disconnected = 'orcd_requests_total{outcome="disconnected",route="generate"}'
    assert metric(after, disconnected) == metric(before, disconnected) + 1
    generated = metric(after, "orcd_generation_tokens_total") - metric(before, "orcd_generation_tokens_total")
    assert generated < LONG  # it stopped early, not at max_tokens


def test_cancel_unknown_request_is_404(client):
    r = client.post("/v1/cancel", json={"request_id": "never-was"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "request_id"


def _long_stream(server, rid: str, pings: list | None = None) -> dict:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        with c.stream("POST", "/v1/generate", json={"prompt": PROMPT, "max_tokens": LONG, "ignore_eos": True,
                                                    "request_id": rid}) as r:
            assert r.status_code == 200
            return list(generate_events(r, pings))[-1][1]


@contextlib.contextmanager
def _pool(client: httpx.Client, ids: list[str]):
    """Threads for long streams; whatever happens, the streams named in `ids` are cancelled at exit."""
    with cf.ThreadPoolExecutor(len(ids)) as pool:
        try:
            yield pool
        finally:
            for rid in ids:
                client.post("/v1/cancel", json={"request_id": rid})


def test_queue_pings_and_overload(client, server):
    """Two running slots + a queue of one: the third stream waits (and gets `: ping` comments before its
    first token), the fourth request is refused with 503 + Retry-After. All end cancelled."""
    pings: list[str] = []
    with _pool(client, ["busy-0", "busy-1", "queued"]) as pool:
        running = [pool.submit(_long_stream, server, f"busy-{i}") for i in range(2)]
        _wait(lambda: client.get("/health").json()["running"] == 2)
        queued = pool.submit(_long_stream, server, "queued", pings)
        _wait(lambda: client.get("/health").json()["active_requests"] == 3)
        r = client.post("/v1/generate", json={"prompt": PROMPT, "max_tokens": 4})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "overloaded"
        _wait(lambda: client.get("/health").json()["waiting"] == 1)
        _wait(lambda: "ping" in pings)
        for rid in ("busy-0", "busy-1", "queued"):
            client.post("/v1/cancel", json={"request_id": rid})
        ends = [f.result(timeout=60) for f in [*running, queued]]
    assert all(e["stop_reason"] == "cancelled" for e in ends)
    wait_idle(client)


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_stream_equals_orcd_generate(client, tiny_model):
    """The same seed through `orcd generate` (its own process, chat template) gives the same text."""
    args = {"max_tokens": 16, "seed": 21, "temperature": 0.8, "top_k": 50, "ignore_eos": True}
    cmd = [sys.executable, "-m", "orcd", "generate", PROMPT, "--model", str(tiny_model),
           "--device", "cpu", "--quiet", "--max-tokens", "16", "--seed", "21", "--temperature", "0.8",
           "--top-k", "50", "--ignore-eos"]
    cli = subprocess.run(cmd, capture_output=True, timeout=120)
    assert cli.returncode == 0, cli.stderr.decode()
    events = _stream(client, chat=True, **args)
    assert "".join(d["t"] for e, d in events if e == "token").encode() == cli.stdout


def test_non_stream_client_gone_is_cancelled(client, server):
    """stream:false too: a client that gives up while its request runs cancels it."""
    before = client.get("/metrics").text
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=0.5) as impatient:
        try:
            impatient.post("/v1/generate", json={"prompt": PROMPT, "max_tokens": LONG, "ignore_eos": True,
                                                 "stream": False})
            raise AssertionError("a 1800-token request finished within the client's timeout")
        except httpx.ReadTimeout:
            pass
    wait_idle(client)
    after = client.get("/metrics").text
    cancelled = 'orcd_requests_total{outcome="cancelled",route="generate"}'
    assert metric(after, cancelled) == metric(before, cancelled) + 1


def test_disconnect_while_queued_frees_the_slot(client, server):
    before = client.get("/metrics").text
    with _pool(client, ["hold-0", "hold-1"]) as pool:
        running = [pool.submit(_long_stream, server, f"hold-{i}") for i in range(2)]
        _wait(lambda: client.get("/health").json()["running"] == 2)
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
            with c.stream("POST", "/v1/generate", json={"prompt": PROMPT, "max_tokens": 4}) as r:
                events = generate_events(r)  # (a discarded generator would close the response at once)
                assert next(events)[0] == "started"
                _wait(lambda: client.get("/health").json()["waiting"] == 1)
            # connection closed while the request waits for a slot
        _wait(lambda: client.get("/health").json()["active_requests"] == 2)
        _wait(lambda: client.get("/health").json()["waiting"] == 0)
        for i in range(2):
            client.post("/v1/cancel", json={"request_id": f"hold-{i}"})
        assert all(f.result(timeout=60)["stop_reason"] == "cancelled" for f in running)
    wait_idle(client)
    after = client.get("/metrics").text
    disconnected = 'orcd_requests_total{outcome="disconnected",route="generate"}'
    assert metric(after, disconnected) == metric(before, disconnected) + 1


def test_curl_style_body_is_read_as_json(client):
    """`curl -d '{...}'` sends form encoding or no content type: the body is still read as JSON."""
    body = json.dumps({"prompt": PROMPT, "max_tokens": 4, "seed": 1, "stream": False, "temperature": 0})
    want = client.post("/v1/generate", json=json.loads(body)).json()["text"]
    for ctype in ("application/x-www-form-urlencoded", None):
        headers = {"content-type": ctype} if ctype else {}
        r = client.post("/v1/generate", content=body.encode(), headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["text"] == want
    r = client.post("/v1/generate", content=b"prompt=hi", headers={"content-type": "text/plain"})
    assert r.status_code == 400
