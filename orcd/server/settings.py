"""Knobs of the HTTP worker, gathered in one frozen dataclass (filled by serve_cli or by tests)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSettings:
    served_model_name: str | None = None  # id in /v1/models and the `model` field; None -> engine.model_name
    api_key: str | None = None  # when set, every route but /health needs it (Bearer or x-api-key)
    max_queue: int = 64  # requests allowed to wait beyond the engine's running slots; more -> 503
    max_body_bytes: int = 4 * 1024 * 1024  # larger request bodies -> 413
    ping_interval_s: float = 5.0  # `: ping` SSE comment after this long without an event
    shutdown_grace_s: float = 30.0  # on SIGTERM: let streams finish this long, then cancel them
    retry_after_s: int = 1  # Retry-After header on 503 (overloaded / draining)
    cors_origins: tuple[str, ...] = ()  # explicit allowlist; empty -> no CORS headers at all
    warmup: bool = True  # run one 1-token generation before /health says ok (and after each model load)
    max_loaded_models: int = 4  # several models: loaded at once at most (LRU unloaded past it); 0 = no limit
    model_idle_timeout_s: float | None = None  # several models: unload one unused this long; None = never
    metrics_dir: str | None = None  # several API processes: prometheus_client's multiprocess directory
