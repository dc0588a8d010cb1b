"""/health, /metrics, defaults of `orcd serve`, and SIGTERM draining (own server)."""

from __future__ import annotations

import argparse
import signal
import threading

import httpx
from server_helpers import LONG, ServerProc, generate_events

from orcd.server import serve_cli


def test_health_fields(server):
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "tiny-qwen2" and h["architecture"] == "qwen2"
    assert h["device"] == "cpu" and h["weights_bytes"] > 0 and h["kv_cache_bytes"] > 0
    assert h["kv_capacity_tokens"] == 512 * 16 and h["active_requests"] == 0


def test_metrics_after_requests(client):
    client.post("/v1/generate", json={"prompt": "hi", "max_tokens": 5, "stream": False, "ignore_eos": True})
    text = client.get("/metrics").text
    for name in ("orcd_requests_total", "orcd_prompt_tokens_total", "orcd_generation_tokens_total",
                 "orcd_time_to_first_token_seconds_bucket", "orcd_time_per_output_token_seconds_bucket",
                 "orcd_queue_depth", "orcd_requests_running", "orcd_kv_cache_usage_ratio",
                 "orcd_prefix_cache_hits_total", "orcd_e2e_request_latency_seconds_count"):
        assert name in text, name
    assert 'orcd_requests_total{outcome="length",route="generate"}' in text


def test_defaults_bind_loopback():
    p = argparse.ArgumentParser()
    serve_cli.add_arguments(p)
    args = p.parse_args([])
    assert args.host == "127.0.0.1" and args.api_key is None


def test_sigterm_drains_then_exits_0(tiny_model, tmp_path):
    """SIGTERM: the port stops accepting, an in-flight stream runs on through the grace period and then
    ends with stop_reason cancelled, and the process exits 0."""
    srv = ServerProc(tiny_model, tmp_path / "drain.log", "--shutdown-grace", "1.0", "--no-warmup",
                     api_key=None)
    try:
        srv.wait_ready()
        events: list[tuple[str, dict]] = []
        first_token = threading.Event()

        def consume() -> None:
            with httpx.stream("POST", srv.url + "/v1/generate", timeout=60,
                              json={"prompt": "x", "max_tokens": LONG, "ignore_eos": True}) as r:
                for ev in generate_events(r):
                    events.append(ev)
                    if ev[0] == "token":
                        first_token.set()

        t = threading.Thread(target=consume)
        t.start()
        assert first_token.wait(60)
        srv.proc.send_signal(signal.SIGTERM)
        refused_while_streaming = False
        while t.is_alive() and not refused_while_streaming:
            try:
                r = httpx.post(srv.url + "/v1/generate", json={"prompt": "y", "max_tokens": 2}, timeout=5)
                refused_while_streaming = r.status_code == 503 and t.is_alive()
            except httpx.TransportError:
                refused_while_streaming = t.is_alive()
        assert refused_while_streaming
        t.join(60)
        assert srv.proc.wait(60) == 0, srv.log()
    finally:
        srv.stop()
    assert events[-1][0] == "end" and events[-1][1]["stop_reason"] == "cancelled"
    # a text-only flush of held-back text may close the stream: `id` null, not counted in tokens_out
    assert sum(e == "token" and d["id"] is not None for e, d in events) == events[-1][1]["tokens_out"]
