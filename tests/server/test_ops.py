"""/health, /metrics and the defaults of `orcd serve`."""

from __future__ import annotations

import argparse

import httpx
from server_helpers import KV_BLOCKS

from orcd.cli import serve as serve_cli


def test_health_fields(server):
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "tiny-qwen2" and h["architecture"] == "qwen2"
    assert h["device"] == "cpu" and h["weights_bytes"] > 0 and h["kv_cache_bytes"] > 0
    assert h["kv_capacity_tokens"] == KV_BLOCKS * 16 and h["active_requests"] == 0


def test_metrics_after_requests(client):
    client.post("/v1/generate", json={"prompt": "hi", "max_tokens": 5, "stream": False, "ignore_eos": True})
    text = client.get("/metrics").text
    for name in ("orcd_requests_total", "orcd_prompt_tokens_total", "orcd_generation_tokens_total",
                 "orcd_time_to_first_token_seconds_bucket", "orcd_time_per_output_token_seconds_bucket",
                 "orcd_queue_depth", "orcd_requests_running", "orcd_kv_cache_usage_ratio",
                 "orcd_prefix_cache_hits_total", "orcd_prefix_cache_recomputed_total",
                 "orcd_e2e_request_latency_seconds_count"):
        assert name in text, name
    assert 'orcd_requests_total{outcome="length",route="generate"}' in text


def _sample(text: str, name: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


def test_queue_time_is_counted_once_per_request(client):
    # queueing apart from prefill (TTFT holds both): one observation per request that produced a token
    before = client.get("/metrics").text
    n0 = _sample(before, "orcd_queue_time_seconds_count") if "orcd_queue_time_seconds_count" in before else 0
    body = {"prompt": "hi", "max_tokens": 3, "stream": False, "ignore_eos": True}
    for _ in range(2):
        client.post("/v1/generate", json=body)
    text = client.get("/metrics").text
    assert _sample(text, "orcd_queue_time_seconds_count") == n0 + 2
    assert 0 <= _sample(text, "orcd_queue_time_seconds_sum") < 60


def test_defaults_bind_loopback():
    p = argparse.ArgumentParser()
    serve_cli.add_arguments(p)
    args = p.parse_args([])
    assert args.host == "127.0.0.1" and args.api_key is None
