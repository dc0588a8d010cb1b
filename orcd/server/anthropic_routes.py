"""Anthropic Messages API: POST /v1/messages (whole or streamed) and /v1/messages/count_tokens, on the
same models, admission and engine as the OpenAI routes. Errors are in Anthropic's shape
({"type": "error", "error": {"type", "message"}}, the message naming the field); shapes and checks are in
anthropic_format.py."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import types
from collections.abc import AsyncIterator

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from orcd.errors import RequestError
from orcd.server.anthropic_format import (
    STOP_REASONS,
    ContentBuilder,
    CountTokensRequest,
    MessagesRequest,
    error_body,
    error_event,
    matched_stop,
    output_options,
    template_messages,
    wants_thinking,
)
from orcd.server.anthropic_tools import forced_choice, parallel_forced
from orcd.server.errors import APIError, _validation_message, api_error_from
from orcd.server.fork import admit_choices
from orcd.server.jobs import Job, JobHub
from orcd.server.load_wait import needs_wait, stream_after_load
from orcd.server.model_pool import ModelSlot
from orcd.server.openai_checks import call_style, grammar_ready
from orcd.server.prep import build_sampling, encode_chat, precheck_sampling
from orcd.server.reasoning import splitter_for
from orcd.server.sse import SSEResponse, sse_event
from orcd.server.tools import tool_splitter, with_tools
from orcd.structured.tool_grammar import forced_tool_grammar

router = APIRouter()
_PING = sse_event({"type": "ping"}, "ping")


def _error(err: Exception) -> JSONResponse:
    api = api_error_from(err)
    message = api.message if not api.param or api.param in api.message else f"{api.param}: {api.message}"
    return JSONResponse(error_body(api.status, message), status_code=api.status, headers=api.headers)


async def _parse(request: Request, model: type[MessagesRequest]) -> MessagesRequest:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"the request body is not valid JSON in UTF-8: {err}") from err
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        message, param = _validation_message(RequestValidationError(err.errors(), body=data))
        raise RequestError(message, param=param) from err


def _sampling_fields(body: MessagesRequest):
    """Anthropic's knobs as the fields build_sampling reads (the rest at their neutral values)."""
    return types.SimpleNamespace(temperature=body.temperature, top_k=body.top_k, top_p=body.top_p,
                                 min_p=None, repetition_penalty=None, presence_penalty=None,
                                 frequency_penalty=None, seed=body.seed, stop=body.stop_sequences,
                                 ignore_eos=False)


def _check_sampling(body: MessagesRequest) -> None:
    try:
        precheck_sampling(_sampling_fields(body))
    except RequestError as err:
        if err.param == "stop":
            raise RequestError("stop_sequences: at most 16, each 1 to 256 characters",
                               param="stop_sequences") from err
        raise


async def _prompt(slot: ModelSlot, hub: JobHub, messages: list[dict], prefill: str | None,
                  tools: list[dict] | None, variables: dict) -> list[int]:
    """variables: other chat-template variables (template_messages)."""
    tok = slot.engine.tokenizer
    ids = await encode_chat(tok, messages, hub.context_length(slot), **variables,
                            **({"tools": tools} if tools else {}))
    if prefill:
        ids += await to_thread.run_sync(tok.encode, prefill)
    return ids


@router.post("/v1/messages")
async def messages(request: Request):
    hub: JobHub = request.app.state.hub
    try:
        body = await _parse(request, MessagesRequest)
        slot = hub.pool.slot(body.model)
        chat = template_messages(body)
        _check_sampling(body)
        if body.stream and needs_wait(hub, slot):
            return stream_after_load(hub, body.model, lambda s: _run(hub, s, body, chat, request),
                                     error_event)
        async with hub.pool.lease(body.model) as slot:
            return await _run(hub, slot, body, chat, request)
    except Exception as err:
        return _error(err)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    hub: JobHub = request.app.state.hub
    try:
        body = await _parse(request, CountTokensRequest)
        hub.pool.slot(body.model)
        chat = template_messages(body)
        async with hub.pool.lease(body.model) as slot:
            return JSONResponse({"input_tokens": len(await _prompt(slot, hub, *chat))})
    except Exception as err:
        return _error(err)


async def _run(hub: JobHub, slot: ModelSlot, body: MessagesRequest, chat: tuple, request: Request):
    """chat: template_messages(body)."""
    ids = await _prompt(slot, hub, *chat)
    max_tokens = hub.resolve_max_tokens(slot, body.max_tokens, len(ids), None, "messages")
    choice, style = forced_choice(body.tool_choice), call_style(slot.engine)
    grammar = output_options(body)[1]  # output_config.format's (never with a forced choice)
    if choice is not None:  # `any` / `tool`: one call (more if asked), in the template's format, by grammar
        grammar = forced_tool_grammar(chat[2], choice, style, parallel_forced(body.tool_choice))
    sampling = dataclasses.replace(build_sampling(_sampling_fields(body), max_tokens), grammar=grammar)
    sampling = await grammar_ready(slot.engine, sampling)
    (job,) = admit_choices(hub, slot, "messages", ids, sampling, 1, "msg_")
    head = {"id": job.request_id, "type": "message", "role": "assistant", "model": slot.name}
    split = tool_splitter(slot.engine, ids, chat[2]) if chat[2] else splitter_for(slot.engine, ids)
    if choice is not None:  # the call starts at the first token: no reasoning block to split off
        split = with_tools(None, False, style, chat[2])
    elif grammar is not None:  # the JSON starts at the first token: all text
        split = None
    thinking = wants_thinking(body)
    if body.stream:
        return SSEResponse(_stream(hub, job, head, ContentBuilder(split, thinking)),
                           on_close=lambda: hub.release(job))
    (events,) = await hub.collect([job], request.receive)
    if job.finish_reason == "error":
        raise APIError(500, job.error or "generation failed", code="generation_failed")
    content = ContentBuilder(split, thinking)
    content.push("".join(ev.text for ev in events), final=True)
    return JSONResponse({**head, "content": content.blocks, **_ending(job, events, content.called)})


def _ending(job: Job, events: list, called: bool) -> dict:
    """stop_reason, stop_sequence and usage of a finished job (`called`: it wrote tool calls)."""
    reason, stop = STOP_REASONS.get(job.finish_reason, "end_turn"), None
    if called and job.finish_reason == "eos":
        reason = "tool_use"
    if job.finish_reason == "stop":
        tok = job.slot.engine.tokenizer
        stop = matched_stop(lambda ids: tok.decode(ids, skip_special=True, strip_leading_space=False),
                            [ev.token_id for ev in events if ev.token_id is not None],
                            "".join(ev.text for ev in events), job.sampling.stop)
        reason = "stop_sequence" if stop is not None else "end_turn"
    return {"stop_reason": reason, "stop_sequence": stop, "usage": _usage(job, events)}


def _usage(job: Job, events: list) -> dict:
    """Anthropic's split of the prompt: `input_tokens` are those computed, `cache_read_input_tokens` those
    the prefix cache served (their sum is the prompt); orcd writes no cache on request
    (`cache_creation_input_tokens` 0)."""
    cached = max((ev.cached_tokens for ev in events), default=0)
    return {"input_tokens": len(job.prompt_ids) - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": job.tokens_out}


async def _stream(hub: JobHub, job: Job, head: dict, content: ContentBuilder) -> AsyncIterator[bytes]:
    out: list[bytes] = []
    content.on_event = lambda name, data: out.append(sse_event(data, name))
    start = {**head, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": len(job.prompt_ids), "cache_creation_input_tokens": 0,
                       "cache_read_input_tokens": 0, "output_tokens": 0}}
    yield sse_event({"type": "message_start", "message": start}, "message_start")
    events = []
    async with contextlib.aclosing(hub.event_batches(job)) as batches:
        async for batch in batches:
            if batch is None:
                yield _PING
                continue
            for ev in batch:
                events.append(ev)
                if ev.finished and job.finish_reason == "error":
                    yield b"".join(out) + error_event(APIError(500, ev.error or "generation failed"))
                    return
                content.push(ev.text, final=ev.finished)
            if out:
                yield b"".join(out)
                out.clear()
    end = _ending(job, events, content.called)
    yield sse_event({"type": "message_delta", "delta": {"stop_reason": end["stop_reason"],
                                                        "stop_sequence": end["stop_sequence"]},
                     "usage": end["usage"]}, "message_delta")
    yield sse_event({"type": "message_stop"}, "message_stop")
