"""A streamed request for a model that is not loaded yet: the SSE response starts at once and sends
`: ping` comments while the model loads (or waits for room), so clients and proxies see a live stream,
not a silent socket. Once loaded, the request runs as usual; an error from then on (a failed load, a
context overflow) arrives in the stream's own error form instead of as an HTTP status."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from orcd.server.errors import APIError, api_error_from, error_body
from orcd.server.jobs import JobHub
from orcd.server.model_pool import ModelSlot
from orcd.server.sse import PING, SSEResponse, sse_event


def generate_error(err: APIError) -> bytes:
    """/v1/generate's `error` event."""
    return sse_event({"code": err.code or "invalid_request", "message": err.message}, "error")


def openai_error(err: APIError) -> bytes:
    """What the OpenAI SDKs raise on: `data: {"error": ...}`, then `[DONE]`."""
    return sse_event(error_body(err.status, err.message, err.param, err.code)) + sse_event("[DONE]")


def needs_wait(hub: JobHub, slot: ModelSlot) -> bool:
    return not (slot.state == "loaded" and not slot.draining)


async def _lease(hub: JobHub, name: str | None) -> AsyncIterator[ModelSlot | None]:
    """Pings until the model is leased, then the slot (pinned: the caller unpins it)."""
    task = asyncio.ensure_future(hub.pool.acquire(name))
    try:
        while not (await asyncio.wait({task}, timeout=hub.settings.ping_interval_s))[0]:
            yield None
        yield task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if not task.cancelled() and task.exception() is None:  # pinned just before the cancel
                hub.pool.unpin(task.result())


async def _stream(hub: JobHub, name: str | None, start: Callable[[ModelSlot], Awaitable[SSEResponse]],
                  error: Callable[[APIError], bytes]) -> AsyncIterator[bytes]:
    slot = None
    try:
        async with contextlib.aclosing(_lease(hub, name)) as leases:
            async for slot in leases:
                if slot is None:
                    yield PING
                else:
                    break
        response = await start(slot)
    except Exception as err:
        yield error(api_error_from(err))
        return
    finally:
        if slot is not None:
            hub.pool.unpin(slot)  # the request's jobs hold their own pins now
    try:
        async with contextlib.aclosing(response.body_iterator) as body:
            async for chunk in body:
                yield chunk
    finally:
        if response.on_close is not None:
            response.on_close()


def stream_after_load(hub: JobHub, name: str | None, start: Callable[[ModelSlot], Awaitable[SSEResponse]],
                      error: Callable[[APIError], bytes]) -> SSEResponse:
    """`start(slot)` prepares and admits the request on the loaded model, returning its SSEResponse."""
    return SSEResponse(_stream(hub, name, start, error))
