"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

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
from orcd.server.logprobs_format import TokenNames
from orcd.server.openai_checks import (
    chat_sampling,
    check_chat,
    check_completion,
    completion_sampling,
    refuse,
)
from orcd.server.openai_stream import ChoiceFormat, collect_choices, stream_choices, usage
from orcd.server.prep import chat_messages, check_model, encode_chat
from orcd.server.schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
)
from orcd.server.sse import SSEResponse

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


def _names(request: Request) -> TokenNames:
    """The server's token-name cache (app.state.token_names, filled as logprobs requests need it)."""
    return request.app.state.token_names


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
    return JSONResponse({**head, "choices": choices, "usage": usage(jobs)})


@router.post("/v1/completions", response_model=CompletionResponse, responses=_ERRORS)
async def completions(body: CompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    model = request.app.state.model_id
    check_model(body.model, model)
    check_completion(body)
    ids, text = await _completion_prompt(body, hub.engine.tokenizer)
    max_tokens = hub.resolve_max_tokens(body.max_tokens, len(ids), None, "prompt")
    echo = "" if not body.echo else text if text is not None else hub.engine.tokenizer.decode(ids)
    jobs = admit_choices(hub, "completions", ids, completion_sampling(body, max_tokens), body.n, "cmpl-")
    fmt = ChoiceFormat(chat=False, names=_names(request) if body.logprobs is not None else None, echo=echo)
    head = _head(jobs, "text_completion", model)
    include = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(hub, jobs, fmt, head, body.stream, include, request)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request):
    hub: JobHub = request.app.state.hub
    model = request.app.state.model_id
    check_model(body.model, model)
    check_chat(body)
    ids = await encode_chat(hub.engine.tokenizer, chat_messages(body.messages), hub.context_length)
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = hub.resolve_max_tokens(getattr(body, max_param), len(ids), None, "messages", max_param)
    jobs = admit_choices(hub, "chat", ids, chat_sampling(body, max_tokens), body.n, "chatcmpl-")
    fmt = ChoiceFormat(chat=True, names=_names(request) if body.logprobs else None)
    head = _head(jobs, "chat.completion", model)
    include = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(hub, jobs, fmt, head, body.stream, include, request)


def _card(request: Request) -> dict:
    return {"id": request.app.state.model_id, "object": "model", "created": request.app.state.created,
            "owned_by": "orcd"}


@router.get("/v1/models", response_model=ModelList, responses={401: {"model": ErrorBody}})
async def models(request: Request) -> dict:
    return {"object": "list", "data": [_card(request)]}


@router.get("/v1/models/{model_id:path}", response_model=ModelCard,
            responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
async def model(model_id: str, request: Request) -> dict:
    check_model(model_id, request.app.state.model_id)
    return _card(request)
