"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

Streams are `data: {json}` events ending with `data: [DONE]`; errors inside a stream are
`data: {"error": {...}}` (what the OpenAI SDKs raise on). Every accepted field is honoured; the ones
orcd does not implement are refused with 400 naming them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from orcd.errors import RequestError
from orcd.server.errors import APIError, ErrorBody, error_body
from orcd.server.jobs import Job, JobHub
from orcd.server.prep import build_sampling, chat_messages, check_model, encode_chat, precheck_sampling
from orcd.server.schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelList,
)
from orcd.server.sse import PING, SSEResponse, sse_event

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 413, 503)}
_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "cancelled", "error": "error"}


def _refuse(param: str, why: str = "is not supported by orcd") -> None:
    raise RequestError(f"{param}{why}" if why.startswith("=") else f"{param} {why}", param=param)


def _check_common(body: CompletionRequest | ChatCompletionRequest) -> None:
    if body.n != 1:
        _refuse("n", f"={body.n}: only n=1 is supported")
    if body.logit_bias:
        _refuse("logit_bias")
    if body.stream_options is not None and not body.stream:
        _refuse("stream_options", "is only allowed with stream=true")
    precheck_sampling(body)


def _check_chat(body: ChatCompletionRequest) -> None:
    _check_common(body)
    if body.logprobs or body.top_logprobs is not None:
        _refuse("logprobs" if body.logprobs else "top_logprobs")
    if body.response_format is not None and body.response_format.get("type") != "text":
        _refuse("response_format", "other than {\"type\": \"text\"} is not supported")
    if body.tools or body.functions:
        _refuse("tools" if body.tools else "functions")
    if body.tool_choice not in (None, "none") or body.function_call not in (None, "none"):
        _refuse("tool_choice" if body.tool_choice not in (None, "none") else "function_call")
    if body.parallel_tool_calls:
        _refuse("parallel_tool_calls")
    if body.max_tokens is not None and body.max_completion_tokens not in (None, body.max_tokens):
        _refuse("max_completion_tokens", "disagrees with max_tokens")


def _check_completion(body: CompletionRequest) -> None:
    _check_common(body)
    if body.logprobs is not None:
        _refuse("logprobs")
    if body.best_of not in (None, 1):
        _refuse("best_of", f"={body.best_of}: only best_of=1 is supported")
    if body.suffix:
        _refuse("suffix")


async def _completion_prompt(body: CompletionRequest, tokenizer) -> tuple[list[int], str | None]:
    """Prompt token ids, and the prompt text when it came as text (echo returns it verbatim)."""
    from anyio import to_thread

    p = body.prompt
    if isinstance(p, list) and p and isinstance(p[0], (str, list)):
        if len(p) != 1:
            _refuse("prompt", f"holds {len(p)} prompts: send one prompt per request")
        p = p[0]
    if isinstance(p, str):
        return await to_thread.run_sync(tokenizer.encode_prompt, p), p
    return list(p), None


def _usage(job: Job) -> dict:
    n_in = len(job.prompt_ids)
    return {"prompt_tokens": n_in, "completion_tokens": job.tokens_out, "total_tokens": n_in + job.tokens_out}


def _stream_error(job: Job) -> bytes:
    return sse_event(error_body(500, job.error or "generation failed", None, "generation_failed"))


async def _openai_stream(hub: JobHub, job: Job, chunk: Callable[[dict], dict], first: dict | None,
                         text_field: Callable[[str], dict], include_usage: bool) -> AsyncIterator[bytes]:
    """`chunk(choice)` wraps one choice into the route's chunk object; `text_field` builds its text (the
    finishing chunk carries `text_field("")`: `text: ""` on completions, as OpenAI sends)."""
    def emit(choice: dict | None, usage: dict | None = None) -> bytes:
        body = chunk(choice)
        if include_usage:
            body["usage"] = usage
        return sse_event(body)

    if first is not None:
        yield emit({"index": 0, **first, "logprobs": None, "finish_reason": None})
    async with contextlib.aclosing(hub.event_batches(job)) as batches:
        async for batch in batches:
            if batch is None:
                yield PING
                continue
            out: list[bytes] = []  # a batch of events goes out as one write
            for ev in batch:
                if ev.text:
                    choice = {"index": 0, **text_field(ev.text), "logprobs": None, "finish_reason": None}
                    out.append(emit(choice))
                if ev.finished and job.finish_reason == "error":
                    out.append(_stream_error(job))
                elif ev.finished:
                    empty = text_field("")
                    reason = _FINISH[job.finish_reason]
                    out.append(emit({"index": 0, **empty, "logprobs": None, "finish_reason": reason}))
                    if include_usage:
                        out.append(emit(None, _usage(job)))
            if out:
                yield b"".join(out)
    yield sse_event("[DONE]")


async def _collect_text(hub: JobHub, job: Job, request: Request) -> str:
    parts = [ev.text for ev in await hub.collect(job, request.receive)]
    if job.finish_reason == "error":
        raise APIError(500, job.error or "generation failed", code="generation_failed")
    return "".join(parts)


async def _respond(hub: JobHub, job: Job, stream: AsyncIterator[bytes] | None, build: Callable,
                   request: Request):
    if stream is not None:
        return SSEResponse(stream, on_close=lambda: hub.release(job))
    return JSONResponse(build(await _collect_text(hub, job, request)))


@router.post("/v1/completions", response_model=CompletionResponse, responses=_ERRORS)
async def completions(body: CompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    model = request.app.state.model_id
    check_model(body.model, model)
    _check_completion(body)
    ids, text = await _completion_prompt(body, hub.engine.tokenizer)
    max_tokens = hub.resolve_max_tokens(body.max_tokens, len(ids), None, "prompt")
    echo = "" if not body.echo else text if text is not None else hub.engine.tokenizer.decode(ids)
    job = hub.admit("completions", ids, build_sampling(body, max_tokens), prefix="cmpl-")
    created = int(time.time())

    def chunk(choice: dict | None) -> dict:
        return {"id": job.request_id, "object": "text_completion", "created": created, "model": model,
                "choices": [] if choice is None else [choice]}

    def build(text: str) -> dict:
        choice = {"index": 0, "text": echo + text, "logprobs": None,
                  "finish_reason": _FINISH[job.finish_reason]}
        return {**chunk(choice), "usage": _usage(job)}

    stream = None
    if body.stream:
        include = bool(body.stream_options and body.stream_options.include_usage)
        first = {"text": echo} if echo else None
        stream = _openai_stream(hub, job, chunk, first, lambda t: {"text": t}, include)
    return await _respond(hub, job, stream, build, request)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    model = request.app.state.model_id
    check_model(body.model, model)
    _check_chat(body)
    ids = await encode_chat(hub.engine.tokenizer, chat_messages(body.messages), hub.context_length)
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = hub.resolve_max_tokens(getattr(body, max_param), len(ids), None, "messages", max_param)
    job = hub.admit("chat", ids, build_sampling(body, max_tokens), prefix="chatcmpl-")
    created = int(time.time())

    def chunk(choice: dict | None) -> dict:
        return {"id": job.request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [] if choice is None else [choice]}

    def build(text: str) -> dict:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": _FINISH[job.finish_reason]}
        return {"id": job.request_id, "object": "chat.completion", "created": created, "model": model,
                "choices": [choice], "usage": _usage(job)}

    stream = None
    if body.stream:
        include = bool(body.stream_options and body.stream_options.include_usage)
        first = {"delta": {"role": "assistant", "content": ""}}
        stream = _openai_stream(hub, job, chunk, first, lambda t: {"delta": {"content": t} if t else {}},
                                include)
    return await _respond(hub, job, stream, build, request)


@router.get("/v1/models", response_model=ModelList, responses={401: {"model": ErrorBody}})
async def models(request: Request) -> dict:
    return {"object": "list", "data": [{"id": request.app.state.model_id, "object": "model",
                                        "created": request.app.state.created, "owned_by": "orcd"}]}
