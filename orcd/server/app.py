"""create_app(engine, settings): the FastAPI application around one AsyncEngine.

The engine runs its step loop on its own thread; routes only await its async iterators, so a long
generation never blocks /health or other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.server import generate_route, openai_routes, tokenize_routes
from orcd.server.errors import ErrorBody, install_error_handlers
from orcd.server.jobs import JobHub
from orcd.server.logprobs_format import TokenNames
from orcd.server.middleware import APIKeyMiddleware, BodyLimitMiddleware
from orcd.server.schemas import Health
from orcd.server.settings import ServerSettings

log = logging.getLogger("orcd.server")


async def _warmup(engine) -> None:
    """One greedy token through the whole path, so the first user request pays no first-call costs."""
    tok = getattr(engine.tokenizer, "bos_id", None)
    req = EngineRequest("orcd-warmup", [tok if tok is not None else 0], SamplingParams(max_tokens=1,
                                                                                      temperature=0.0))
    async for ev in engine.generate(req):
        if ev.finished:
            break


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


def begin_drain(app: FastAPI) -> None:
    """SIGTERM: refuse new requests now; cancel what still runs after the grace period."""
    hub: JobHub = app.state.hub
    if hub.draining:
        return
    hub.draining = True
    grace = app.state.settings.shutdown_grace_s
    log.info("draining %d request(s), grace %.1f s", len(hub.active), grace)

    async def cancel_later() -> None:
        await asyncio.sleep(grace)
        if hub.active:
            log.info("grace period over: cancelling %d request(s)", hub.cancel_all())

    app.state.drain_task = asyncio.get_running_loop().create_task(cancel_later())


def create_app(engine, settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or ServerSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            if settings.warmup:
                await _warmup(engine)
            app.state.ready = True
            yield
        finally:
            app.state.ready = False
            drain = getattr(app.state, "drain_task", None)
            if drain is not None:
                drain.cancel()
            await asyncio.to_thread(engine.shutdown)

    app = FastAPI(title="orcd", version="0.1.0", lifespan=lifespan,
                  description="GGUF inference worker: /v1/generate SSE stream and an OpenAI-compatible API")
    app.state.settings = settings
    app.state.hub = JobHub(engine, settings)
    app.state.token_names = TokenNames(engine.tokenizer)  # logprobs: token id -> (text, bytes), cached
    app.state.model_id = settings.served_model_name or str(engine.model_name)
    app.state.created = int(time.time())
    app.state.ready = False
    install_error_handlers(app)
    app.include_router(generate_route.router)
    app.include_router(openai_routes.router)
    app.include_router(tokenize_routes.router)
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
        engine = hub.engine
        ready = request.app.state.ready
        status = "draining" if hub.draining else "ok" if ready else "loading"
        stats = hub.engine_stats() if ready else {}
        body = {"status": status, "model": request.app.state.model_id,
                "architecture": getattr(engine, "architecture", None),
                "device": str(getattr(engine, "device", None)), "active_requests": len(hub.active),
                "device_memory": _device_memory(getattr(engine, "device", "")) if ready else None}
        for key in ("weights_bytes", "kv_cache_bytes", "kv_capacity_tokens", "kv_blocks_total",
                    "kv_blocks_used", "running", "waiting"):
            body[key] = stats.get(key)
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    @app.get("/metrics", response_class=Response, responses={401: {"model": ErrorBody}, 200: {
        "content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def metrics(request: Request) -> Response:
        return Response(request.app.state.hub.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")
