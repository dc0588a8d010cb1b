"""POST /v1/generate (orcd's own SSE stream) and POST /v1/cancel.

Stream: `started` {request_id, model, prompt_tokens}; one `token` {i, id, t} per generated token as it
is produced; then `end` {request_id, tokens_out, stop_reason, ttft_ms, tokens_per_s} or `error`
{code, message}. `: ping` comments fill silences longer than the ping interval.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request

from orcd.server.errors import APIError, ErrorBody
from orcd.server.jobs import Job, JobHub
from orcd.server.load_wait import generate_error, needs_wait, stream_after_load
from orcd.server.model_pool import ModelSlot
from orcd.server.prep import build_sampling, encode_text, precheck_sampling
from orcd.server.schemas import CancelRequest, CancelResponse, GenerateRequest, GenerateResponse
from orcd.server.sse import PING, SSEResponse, sse_event

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 413, 503)}
DEFAULT_MAX_TOKENS = 256


def _end_fields(job: Job) -> dict:
    return {"request_id": job.request_id, "tokens_out": job.tokens_out, "stop_reason": job.finish_reason,
            "ttft_ms": job.ttft_ms, "tokens_per_s": job.tokens_per_s}


async def _sse_stream(hub: JobHub, job: Job, model: str) -> AsyncIterator[bytes]:
    yield sse_event({"request_id": job.request_id, "model": model, "prompt_tokens": len(job.prompt_ids)},
                    "started")
    async with contextlib.aclosing(hub.event_batches(job)) as batches:
        async for batch in batches:
            if batch is None:
                yield PING
                continue
            data = b"".join([part for ev in batch for part in _frames(job, ev)])
            if data:  # a batch of events goes out as one write
                yield data


def _token_frame(i: int, token_id: int | None, text: str) -> bytes:
    """sse_event({"i": i, "id": token_id, "t": text}, "token"), byte for byte, without the generic path."""
    t = json.dumps(text, ensure_ascii=False)  # JSON-escaped: no raw newline
    if "\x85" in t or "\u2028" in t or "\u2029" in t:
        return sse_event({"i": i, "id": token_id, "t": text}, "token")
    tid = "null" if token_id is None else int(token_id)
    return f'event: token\ndata: {{"i":{int(i)},"id":{tid},"t":{t}}}\n\n'.encode()


def _frames(job: Job, ev) -> list[bytes]:
    """The SSE events for one TokenEvent (a batch of them goes out as one write)."""
    out = []
    if ev.token_id is not None or ev.text:
        # A final event may carry held-back text without a new token: id is then null.
        out.append(_token_frame(ev.index, ev.token_id, ev.text))
    if ev.finished and job.finish_reason == "error":
        message = job.error or "generation failed"
        out.append(sse_event({"code": "generation_failed", "message": message}, "error"))
    elif ev.finished:
        out.append(sse_event(_end_fields(job), "end"))
    return out


async def _collect(hub: JobHub, job: Job, model: str, request: Request) -> dict:
    events = (await hub.collect([job], request.receive))[0]
    text = [ev.text for ev in events]
    ids = [ev.token_id for ev in events if ev.token_id is not None]
    if job.finish_reason == "error":
        raise APIError(500, job.error or "generation failed", code="generation_failed")
    return {"model": model, "text": "".join(text), "token_ids": ids, "prompt_tokens": len(job.prompt_ids),
            **_end_fields(job)}


@router.post("/v1/generate", response_model=GenerateResponse, responses={
    **_ERRORS, 200: {"description": "JSON body (stream=false) or an SSE stream (stream=true)",
                     "content": {"text/event-stream": {}}}})
async def generate(body: GenerateRequest, request: Request):
    hub: JobHub = request.app.state.hub
    slot = hub.pool.slot(body.model)  # an unknown model is a 404 before any field is looked at
    precheck_sampling(body)
    hub.check_request_id(body.request_id)
    if body.stream and needs_wait(hub, slot):  # `: ping` while the model loads
        return stream_after_load(hub, body.model, lambda s: _generate(hub, s, body, request), generate_error)
    async with hub.pool.lease(body.model) as slot:  # no model: the default (first) one; loads it if needed
        return await _generate(hub, slot, body, request)


async def _generate(hub: JobHub, slot: ModelSlot, body: GenerateRequest, request: Request):
    ids = await encode_text(slot.engine.tokenizer, body.prompt, body.chat, hub.context_length(slot))
    max_tokens = hub.resolve_max_tokens(slot, body.max_tokens, len(ids), DEFAULT_MAX_TOKENS, "prompt")
    job = hub.admit(slot, "generate", ids, build_sampling(body, max_tokens), body.request_id)
    if not body.stream:
        return await _collect(hub, job, slot.name, request)
    return SSEResponse(_sse_stream(hub, job, slot.name), on_close=lambda: hub.release(job))


@router.post("/v1/cancel", response_model=CancelResponse, responses=_ERRORS)
async def cancel(body: CancelRequest, request: Request) -> dict:
    hub: JobHub = request.app.state.hub
    if not hub.cancel(body.request_id) and not await _cancel_shared(hub, body.request_id):
        raise APIError(404, f"no running request {body.request_id!r}", param="request_id",
                       code="request_not_found")
    return {"request_id": body.request_id, "cancelled": True}


async def _cancel_shared(hub: JobHub, request_id: str) -> bool:
    """--api-processes: the request may run in another API process over the same engine."""
    cancel = getattr(hub.pool.slots[hub.pool.default].engine, "cancel_shared", None)
    return cancel is not None and not hub.pool.multi and await cancel(request_id)
