"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions (/v1/models: model_routes.py).

Field checks are in openai_checks.py; choices (n of them, streamed or collected, with logprobs) in
openai_stream.py. Every accepted field is honoured; the ones orcd does not implement are refused with
400 naming them.
"""

from __future__ import annotations

import time

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from orcd.server.errors import ErrorBody
from orcd.server.fork import admit_choices
from orcd.server.jobs import Job, JobHub
from orcd.server.load_wait import needs_wait, openai_error, stream_after_load
from orcd.server.model_pool import ModelSlot
from orcd.server.openai_checks import (
    call_style,
    chat_grammar,
    chat_sampling,
    check_chat,
    check_completion,
    checked_tools,
    completion_sampling,
    forced,
    grammar_ready,
    refuse,
)
from orcd.server.openai_stream import ChoiceFormat, collect_choices, stream_choices, usage
from orcd.server.prep import chat_messages, encode_chat
from orcd.server.reasoning import splitter_for, template_kwargs
from orcd.server.schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
)
from orcd.server.sse import SSEResponse
from orcd.server.tools import tool_splitter, with_tools

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 413, 503)}


async def _completion_prompt(body: CompletionRequest, tokenizer) -> tuple[list[int], str | None]:
    """Prompt token ids, and the prompt text when it came as text (echo returns it verbatim)."""
    p = body.prompt
    if isinstance(p, list) and p and isinstance(p[0], (str, list)):
        if len(p) != 1:
            refuse("prompt", f"holds {len(p)} prompts: send one prompt per request")
        p = p[0]
    if isinstance(p, str):
        return await to_thread.run_sync(tokenizer.encode_prompt, p), p
    return list(p), None


def _head(jobs: list[Job], obj: str, model: str) -> dict:
    return {"id": jobs[0].request_id, "object": obj, "created": int(time.time()), "model": model}


async def _respond(hub: JobHub, jobs: list[Job], fmt: ChoiceFormat, head: dict, stream: bool,
                   include_usage: bool, request: Request):
    """head: the id/object/created/model fields; the streamed chunks' `object` is head's + `.chunk`
    (chat) or the same (completions)."""
    if stream:
        obj = "chat.completion.chunk" if fmt.chat else head["object"]

        def chunk(choices: list) -> dict:
            return {**head, "object": obj, "choices": choices}

        def release_all() -> None:
            for job in jobs:
                hub.release(job)

        return SSEResponse(stream_choices(hub, jobs, fmt, chunk, include_usage), on_close=release_all)
    choices = await collect_choices(hub, jobs, fmt, request.receive)
    return JSONResponse({**head, "choices": choices, "usage": usage(jobs, fmt.cached)})


@router.post("/v1/completions", response_model=CompletionResponse, responses=_ERRORS)
async def completions(body: CompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    slot = hub.pool.slot(body.model)  # an unknown model is a 404 before any field is looked at
    check_completion(body)
    if body.stream and needs_wait(hub, slot):  # `: ping` while the model loads
        return stream_after_load(hub, body.model, lambda s: _completions(hub, s, body, request), openai_error)
    async with hub.pool.lease(body.model) as slot:  # loads the model if it is not loaded
        return await _completions(hub, slot, body, request)


async def _completions(hub: JobHub, slot: ModelSlot, body: CompletionRequest, request: Request):
    tok = slot.engine.tokenizer
    ids, text = await _completion_prompt(body, tok)
    max_tokens = hub.resolve_max_tokens(slot, body.max_tokens, len(ids), None, "prompt")
    echo = "" if not body.echo else text if text is not None else tok.decode(ids)
    sampling = await grammar_ready(slot.engine, completion_sampling(body, max_tokens))
    jobs = admit_choices(hub, slot, "completions", ids, sampling, body.n, "cmpl-")
    fmt = ChoiceFormat(chat=False, names=slot.token_names if body.logprobs is not None else None, echo=echo)
    head = _head(jobs, "text_completion", slot.name)
    include = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(hub, jobs, fmt, head, body.stream, include, request)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    slot = hub.pool.slot(body.model)
    check_chat(body)
    messages = chat_messages(body.messages)
    if body.stream and needs_wait(hub, slot):
        return stream_after_load(hub, body.model, lambda s: _chat(hub, s, body, messages, request),
                                 openai_error)
    async with hub.pool.lease(body.model) as slot:
        return await _chat(hub, slot, body, messages, request)


async def _chat(hub: JobHub, slot: ModelSlot, body: ChatCompletionRequest, messages: list[dict],
                request: Request):
    tools = checked_tools(body)
    use = tools if body.tool_choice != "none" else None  # "none": the model is not told of them
    extra = template_kwargs(body.chat_template_kwargs, body.reasoning_effort)
    extra |= {"tools": use} if use else {}
    ids = await encode_chat(slot.engine.tokenizer, messages, hub.context_length(slot), **extra)
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = hub.resolve_max_tokens(slot, getattr(body, max_param), len(ids), None, "messages", max_param)
    style = call_style(slot.engine)
    grammar = chat_grammar(body, use, style)
    sampling = await grammar_ready(slot.engine, chat_sampling(body, max_tokens, grammar))
    jobs = admit_choices(hub, slot, "chat", ids, sampling, body.n, "chatcmpl-")
    split = tool_splitter(slot.engine, ids, use) if use else splitter_for(slot.engine, ids)
    if grammar is not None:  # held from the first token: no reasoning block (the prompt may open one)
        split = with_tools(None, False, style, use) if forced(body.tool_choice) else None
    fmt = ChoiceFormat(chat=True, names=slot.token_names if body.logprobs else None, split=split)
    head = _head(jobs, "chat.completion", slot.name)
    include = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(hub, jobs, fmt, head, body.stream, include, request)
