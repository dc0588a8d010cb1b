"""Prometheus metrics: per-app registry (no global state), counters/histograms updated by the request
code, engine gauges read from AsyncEngine.stats() at scrape time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Seconds. TTFT spans queueing + prefill; per-token latency is the gap between consecutive tokens.
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
_E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _EngineCollector(Collector):
    def __init__(self, stats: Callable[[], dict], active: Callable[[], int]):
        self._stats, self._active = stats, active

    def collect(self) -> Iterator:
        s = self._stats() or {}
        try:  # scraped from the /metrics handler, on the server's event loop (the scrape counts itself)
            tasks = len(asyncio.all_tasks())
        except RuntimeError:
            tasks = None
        if tasks is not None:
            yield GaugeMetricFamily("orcd_event_loop_tasks", "asyncio tasks alive on the server's loop",
                                    value=tasks)
        yield GaugeMetricFamily("orcd_active_requests", "requests admitted by the server and not finished",
                                value=self._active())
        gauges = [("orcd_requests_running", "sequences in the running batch", "running"),
                  ("orcd_queue_depth", "requests waiting for a running slot", "waiting"),
                  ("orcd_kv_blocks_used", "KV cache blocks in use", "kv_blocks_used"),
                  ("orcd_kv_blocks_total", "KV cache blocks allocated", "kv_blocks_total"),
                  ("orcd_kv_cache_bytes", "bytes of device memory held by the KV cache", "kv_cache_bytes"),
                  ("orcd_weights_bytes", "bytes of device memory held by weights", "weights_bytes")]
        for name, doc, key in gauges:
            if s.get(key) is not None:
                yield GaugeMetricFamily(name, doc, value=float(s[key]))
        total, used = s.get("kv_blocks_total"), s.get("kv_blocks_used")
        if total:
            yield GaugeMetricFamily("orcd_kv_cache_usage_ratio", "used / total KV blocks", value=used / total)
        if s.get("prefix_cache_hits") is not None:
            yield CounterMetricFamily("orcd_prefix_cache_hits", "prompt tokens (or blocks) served from the "
                                      "prefix cache", value=float(s["prefix_cache_hits"]))


class ServerMetrics:
    def __init__(self, stats: Callable[[], dict], active: Callable[[], int]):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("orcd_requests", "finished generation requests", ["route", "outcome"],
                                registry=r)
        self.rejected = Counter("orcd_rejected_requests", "requests refused before generation",
                                ["reason"], registry=r)
        self.prompt_tokens = Counter("orcd_prompt_tokens", "prompt tokens of admitted requests", registry=r)
        self.generated_tokens = Counter("orcd_generation_tokens", "generated tokens", registry=r)
        self.ttft = Histogram("orcd_time_to_first_token_seconds", "request arrival to first token",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("orcd_time_per_output_token_seconds", "gap between consecutive tokens",
                              buckets=_TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("orcd_e2e_request_latency_seconds", "request arrival to last event",
                             buckets=_E2E_BUCKETS, registry=r)
        r.register(_EngineCollector(stats, active))

    def render(self) -> bytes:
        return generate_latest(self.registry)
