"""Prometheus metrics: per-app registry (no global state), counters/histograms updated by the request
code, engine gauges read from AsyncEngine.stats() at scrape time.

With several API processes (`orcd serve --api-processes N`, `multiprocess_dir` set) counters and
histograms are summed over the processes (prometheus_client's multiprocess mode: each process writes
its values to files there) and orcd_active_requests is a gauge summed over the live processes; engine
gauges come from the engine's stats, the same in every process; orcd_event_loop_tasks is the answering
process's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Seconds. TTFT spans queueing + prefill; per-token latency is the gap between consecutive tokens.
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
_E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _EngineCollector(Collector):
    def __init__(self, stats: Callable[[], dict], active: Callable[[], int] | None):
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
        if self._active is not None:
            yield GaugeMetricFamily("orcd_active_requests", ACTIVE_DOC, value=self._active())
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
        if s.get("prefix_cache_recomputed") is not None:
            yield CounterMetricFamily("orcd_prefix_cache_recomputed", "cached prompt tokens recomputed: a "
                                      "prefix too short to leave the prefill graphs for",
                                      value=float(s["prefix_cache_recomputed"]))


ACTIVE_DOC = "requests admitted by the server and not finished"

_MODEL_GAUGES = (("orcd_model_kv_blocks_used", "KV cache blocks in use", "kv_blocks_used"),
                 ("orcd_model_kv_blocks_total", "KV cache blocks allocated", "kv_blocks_total"),
                 ("orcd_model_kv_cache_bytes", "bytes held by the KV cache", "kv_cache_bytes"),
                 ("orcd_model_weights_bytes", "bytes held by weights", "weights_bytes"),
                 ("orcd_model_requests_running", "sequences in the running batch", "running"),
                 ("orcd_model_queue_depth", "requests waiting for a running slot", "waiting"))


class _ModelCollector(Collector):
    """Per-model gauges, labelled by model: loaded or not, requests in flight, the engine's memory."""

    def __init__(self, rows: Callable[[], list[tuple[str, str, int, dict]]]):
        self._rows = rows

    def collect(self) -> Iterator:
        rows = self._rows()
        loaded = GaugeMetricFamily("orcd_model_loaded", "1 while the model is loaded", labels=["model"])
        active = GaugeMetricFamily("orcd_model_active_requests", "requests admitted and not finished",
                                   labels=["model"])
        gauges = [(GaugeMetricFamily(name, doc, labels=["model"]), key) for name, doc, key in _MODEL_GAUGES]
        for name, state, jobs, stats in rows:
            loaded.add_metric([name], 1.0 if state == "loaded" else 0.0)
            active.add_metric([name], jobs)
            for family, key in gauges:
                if stats.get(key) is not None:
                    family.add_metric([name], float(stats[key]))
        yield loaded
        yield active
        yield from (family for family, _ in gauges)


class ServerMetrics:
    """Server-wide series (all models together, as with one model), and `orcd_model_*` series labelled
    by model."""

    def __init__(self, stats: Callable[[], dict], active: Callable[[], int],
                 rows: Callable[[], list[tuple[str, str, int, dict]]] = list,
                 multiprocess_dir: str | None = None):
        self.registry = CollectorRegistry()
        self.multiprocess_dir = multiprocess_dir
        r = self.registry
        self.requests = Counter("orcd_requests", "finished generation requests", ["route", "outcome"],
                                registry=r)
        self.rejected = Counter("orcd_rejected_requests", "requests refused before generation",
                                ["reason"], registry=r)
        self.prompt_tokens = Counter("orcd_prompt_tokens", "prompt tokens of admitted requests", registry=r)
        self.generated_tokens = Counter("orcd_generation_tokens", "generated tokens", registry=r)
        self.ttft = Histogram("orcd_time_to_first_token_seconds", "request arrival to first token",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.queue_time = Histogram("orcd_queue_time_seconds",
                                    "request arrival in the engine to its first scheduled step",
                                    buckets=_TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("orcd_time_per_output_token_seconds", "gap between consecutive tokens",
                              buckets=_TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("orcd_e2e_request_latency_seconds", "request arrival to last event",
                             buckets=_E2E_BUCKETS, registry=r)
        self.model_requests = Counter("orcd_model_requests", "finished generation requests per model",
                                      ["model", "route", "outcome"], registry=r)
        self.model_prompt_tokens = Counter("orcd_model_prompt_tokens", "prompt tokens per model", ["model"],
                                           registry=r)
        self.model_generated_tokens = Counter("orcd_model_generation_tokens", "generated tokens per model",
                                              ["model"], registry=r)
        self.model_loads = Counter("orcd_model_loads", "model loads (outcome: ok or failed)",
                                   ["model", "outcome"], registry=r)
        self.model_unloads = Counter("orcd_model_unloads", "model unloads (reason: lru, idle, request)",
                                     ["model", "reason"], registry=r)
        self.active = None if multiprocess_dir is None else Gauge(
            "orcd_active_requests", ACTIVE_DOC, multiprocess_mode="livesum", registry=r)
        self._collectors = (_EngineCollector(stats, active if self.active is None else None),
                            _ModelCollector(rows))
        for c in self._collectors:
            r.register(c)
        self._children: dict[tuple, object] = {}

    def set_active(self, n: int) -> None:
        """JobHub's count of admitted requests changed (a gauge only with several API processes)."""
        if self.active is not None:
            self.active.set(n)

    def child(self, metric, *labels: str):
        """metric.labels(*labels), looked up once per label set: labels() validates and locks on every
        call (~3 µs), and the request path bumps a labelled counter per event batch."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def model_event(self, name: str, event: str, reason: str) -> None:
        """ModelPool's hook: `load`, `load_failed`, or `unload` with its reason."""
        if event == "unload":
            self.model_unloads.labels(name, reason).inc()
        else:
            self.model_loads.labels(name, "ok" if event == "load" else "failed").inc()

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()  # every process's counters, histograms and live gauges, summed
        MultiProcessCollector(registry, path=self.multiprocess_dir)
        for c in self._collectors:
            registry.register(c)
        return generate_latest(registry)
