"""create_app(engine or pool, settings): the FastAPI application around one AsyncEngine, or around a
ModelPool of several models (orcd/server/model_pool.py), one AsyncEngine each while loaded.

Each engine runs its step loop on its own thread; routes only await its async iterators, so a long
generation never blocks /health or other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from orcd.server import (
    anthropic_routes,
    generate_route,
    model_routes,
    openai_routes,
    responses_routes,
    tokenize_routes,
)
from orcd.server.errors import ErrorBody, install_error_handlers
from orcd.server.jobs import JobHub
from orcd.server.middleware import APIKeyMiddleware, BodyLimitMiddleware
from orcd.server.model_pool import ModelPool
from orcd.server.schemas import Health
from orcd.server.settings import ServerSettings

log = logging.getLogger("orcd.server")


def _device_memory(device) -> dict[str, int] | None:
    """Memory as the device itself reports it (cudaMemGetInfo), not as orcd counts it."""
    if not str(device).startswith("cuda"):
        return None
    try:
        import torch

        free, total = torch.cuda.mem_get_info(torch.device(str(device)))
    except Exception:
        return None
    return {"free_bytes": int(free), "total_bytes": int(total), "used_bytes": int(total - free)}


def _engine_memory(pool: ModelPool) -> dict[str, int] | None:
    """Device memory as an engine process read it (orcd.engine.core_process): this process then opens no
    CUDA context of its own to read it. None for in-process engines."""
    return next((st["device_memory"] for *_, st in pool.model_rows() if st.get("device_memory")), None)


def begin_drain(app: FastAPI) -> None:
    """SIGTERM: refuse new requests now; cancel what still runs after the grace period."""
    hub: JobHub = app.state.hub
    if hub.draining:
        return
    hub.draining = True
    hub.pool.close()  # requests waiting for a model to load get 503 too
    grace = app.state.settings.shutdown_grace_s
    log.info("draining %d request(s), grace %.1f s", len(hub.active), grace)

    async def cancel_later() -> None:
        await asyncio.sleep(grace)
        if hub.active:
            log.info("grace period over: cancelling %d request(s)", hub.cancel_all())

    app.state.drain_task = asyncio.get_running_loop().create_task(cancel_later())


def create_app(engine, settings: ServerSettings | None = None) -> FastAPI:
    """`engine`: one AsyncEngine (served as settings.served_model_name or its model_name), or a ModelPool."""
    settings = settings or ServerSettings()
    pool = engine if isinstance(engine, ModelPool) else ModelPool.single(
        engine, settings.served_model_name or str(engine.model_name), settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await pool.start()
            app.state.ready = True
            yield
        finally:
            app.state.ready = False
            drain = getattr(app.state, "drain_task", None)
            if drain is not None:
                drain.cancel()
            await pool.shutdown()

    app = FastAPI(title="orcd", version="0.1.0", lifespan=lifespan,
                  description="GGUF inference worker: /v1/generate SSE stream and an OpenAI-compatible API")
    app.state.settings = settings
    app.state.hub = JobHub(pool, settings)
    app.state.pool = pool
    app.state.created = int(time.time())
    app.state.ready = False
    install_error_handlers(app)
    app.include_router(generate_route.router)
    app.include_router(openai_routes.router)
    app.include_router(anthropic_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(tokenize_routes.router)
    app.include_router(model_routes.router)
    _add_ops_routes(app)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=settings.api_key)
    if settings.cors_origins:  # outermost, so preflights are answered before the key check
        # Any request header: SDKs send their own (the OpenAI JS SDK's x-stainless-*, anthropic-version);
        # the origin allowlist is what guards the server.
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["*"], expose_headers=["retry-after"])
    return app


def _add_ops_routes(app: FastAPI) -> None:
    @app.get("/health", response_model=Health, responses={503: {"model": Health}})
    async def health(request: Request) -> JSONResponse:
        hub: JobHub = request.app.state.hub
        pool: ModelPool = hub.pool
        engines = [s.engine for s in pool.slots.values() if s.engine is not None]
        engine = None if pool.multi or not engines else engines[0]
        ready = request.app.state.ready
        failure = None if pool.multi or engine is None else getattr(engine, "failure", None)
        status = "draining" if hub.draining else "error" if failure else "ok" if ready else "loading"
        stats = pool.stats() if ready else {}
        device = getattr(engine, "device", None) if engine is not None else \
            getattr(engines[0], "device", None) if engines else None
        body = {"status": status, "error": failure, "pid": os.getpid(),  # which API process answered
                "model": None if pool.multi else pool.default,
                "architecture": getattr(engine, "architecture", None),
                "device": None if device is None else str(device), "active_requests": len(hub.active),
                "device_memory": _engine_memory(pool) or _device_memory(device or "") if ready else None}
        for key in ("weights_bytes", "kv_cache_bytes", "kv_capacity_tokens", "kv_blocks_total",
                    "kv_blocks_used", "running", "waiting"):
            body[key] = stats.get(key)
        body["models"] = [{"id": name, "status": state, "active_requests": jobs,
                           **{k: st.get(k) for k in ("weights_bytes", "kv_cache_bytes", "kv_blocks_used",
                                                     "kv_blocks_total")}}
                          for name, state, jobs, st in pool.model_rows()]
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    @app.get("/metrics", response_class=Response, responses={401: {"model": ErrorBody}, 200: {
        "content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def metrics(request: Request) -> Response:
        return Response(request.app.state.hub.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")
