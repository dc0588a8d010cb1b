"""OpenAI Responses API: POST /v1/responses (stateless), whole or streamed, on the same models, admission
and engine as the chat route. Request checks and input items: responses_format.py; output items and
stream events: responses_stream.py. Errors are OpenAI's envelope, 400s naming the field; an error after a
stream started is a `response.failed` event (before the model loaded: an `error` event)."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from orcd.server.errors import APIError, ErrorBody
from orcd.server.fork import admit_choices
from orcd.server.jobs import Job, JobHub
from orcd.server.load_wait import needs_wait, stream_after_load
from orcd.server.model_pool import ModelSlot
from orcd.server.openai_checks import call_style, grammar_ready
from orcd.server.prep import build_sampling, encode_chat, precheck_sampling
from orcd.server.reasoning import splitter_for
from orcd.server.responses_format import (
    ResponsesRequest,
    chat_tool_choice,
    check_request,
    effort_vars,
    format_grammar,
    input_messages,
    template_tools,
)
from orcd.server.responses_stream import ENDINGS, EventWriter, OutputBuilder, response_body, response_head
from orcd.server.sse import PING, SSEResponse
from orcd.server.tools import tool_splitter
from orcd.structured.tool_grammar import forced_tool_grammar

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 413, 503)}


def _sampling_fields(body: ResponsesRequest):
    """The Responses knobs as the fields build_sampling reads (the rest at their neutral values)."""
    return types.SimpleNamespace(temperature=body.temperature, top_k=None, top_p=body.top_p, min_p=None,
                                 repetition_penalty=None, presence_penalty=None, frequency_penalty=None,
                                 seed=body.seed, stop=None, ignore_eos=False)


def _error_event(err: APIError) -> bytes:
    """A failure before the response existed (the model failed to load, the input overflowed)."""
    return EventWriter().frame("error", {"code": err.code, "message": err.message, "param": err.param})


@router.post("/v1/responses", responses=_ERRORS)
async def responses(body: ResponsesRequest, request: Request):
    hub: JobHub = request.app.state.hub
    slot = hub.pool.slot(body.model)  # an unknown model is a 404 before any field is looked at
    check_request(body)
    tools = template_tools(body.tools, body.tool_choice)
    messages = input_messages(body.instructions, body.input)
    format_grammar(body.text)  # a bad schema: 400 before the model loads
    precheck_sampling(_sampling_fields(body))
    if body.stream and needs_wait(hub, slot):
        return stream_after_load(hub, body.model, lambda s: _run(hub, s, body, messages, tools, request),
                                 _error_event)
    async with hub.pool.lease(body.model) as slot:
        return await _run(hub, slot, body, messages, tools, request)


@router.get("/v1/responses/{response_id}", responses=_ERRORS)
@router.delete("/v1/responses/{response_id}", responses=_ERRORS)
@router.get("/v1/responses/{response_id}/input_items", responses=_ERRORS)
async def stored_response(response_id: str):
    raise APIError(404, f"no response {response_id!r}: orcd keeps no responses (/v1/responses is stateless)",
                   code="response_not_found")


def _grammar(body: ResponsesRequest, tools: list[dict] | None, engine) -> str | None:
    """With tool_choice "required" / a named function: one call (with parallel_tool_calls=true given: one
    or more) in the chat template's tool-call format
    (text.format shapes text output, which a forced call has none of: agents send both); else
    text.format's grammar (orcd.structured); None: free text."""
    if body.tool_choice == "required" or isinstance(body.tool_choice, dict):  # parallel: one or more
        return forced_tool_grammar(tools or [], chat_tool_choice(body.tool_choice), call_style(engine),
                                   body.parallel_tool_calls is True)
    return format_grammar(body.text)


async def _run(hub: JobHub, slot: ModelSlot, body: ResponsesRequest, messages: list[dict],
               tools: list[dict] | None, request: Request):
    use = tools if body.tool_choice != "none" else None  # "none": the model is not told of them
    ids = await encode_chat(slot.engine.tokenizer, messages, hub.context_length(slot), param="input",
                            **effort_vars(body), **({"tools": use} if use else {}))
    max_tokens = hub.resolve_max_tokens(slot, body.max_output_tokens, len(ids), None, "input",
                                        "max_output_tokens")
    sampling = dataclasses.replace(build_sampling(_sampling_fields(body), max_tokens),
                                   grammar=_grammar(body, use, slot.engine))
    sampling = await grammar_ready(slot.engine, sampling)  # the grammar backend built off the event loop
    (job,) = admit_choices(hub, slot, "responses", ids, sampling, 1, "resp_")
    head = response_head(job.request_id, body, slot.name, sampling, tools)
    split = tool_splitter(slot.engine, ids, use) if use else splitter_for(slot.engine, ids)
    parallel = body.parallel_tool_calls is not False
    if body.stream:
        writer, out = EventWriter(), []
        builder = OutputBuilder(split, parallel, lambda name, data: out.append(writer.frame(name, data)))
        return SSEResponse(_stream(hub, job, head, builder, writer, out), on_close=lambda: hub.release(job))
    (events,) = await hub.collect([job], request.receive)
    if job.finish_reason == "error":
        raise APIError(500, job.error or "generation failed", code="generation_failed")
    builder = OutputBuilder(split, parallel)
    for ev in events:
        builder.push(ev.text, final=ev.finished)
    builder.finish("completed" if job.finish_reason in ("eos", "stop") else "incomplete")
    cached = max((ev.cached_tokens for ev in events), default=0)
    return JSONResponse(response_body(head, builder, job, _failure(job, None), cached))


def _failure(job: Job, error: str | None) -> str | None:
    """Why a job that ended with an error or a cancel ended (None for the others)."""
    if job.finish_reason == "cancelled":
        return "cancelled (by /v1/cancel, or at shutdown)"
    if job.finish_reason == "error":
        return error or "generation failed"
    return None


async def _stream(hub: JobHub, job: Job, head: dict, builder: OutputBuilder, writer: EventWriter,
                  out: list[bytes]) -> AsyncIterator[bytes]:
    """`out`: where the builder's events land as frames (sent after each batch of engine events)."""
    start = {**head, "status": "in_progress", "output": []}
    yield writer.frame("response.created", {"response": start}) + writer.frame("response.in_progress",
                                                                               {"response": start})
    error, cached = None, 0
    async with contextlib.aclosing(hub.event_batches(job)) as batches:
        async for batch in batches:
            if batch is None:
                yield PING
                continue
            for ev in batch:
                cached = max(cached, ev.cached_tokens)
                if ev.finished and job.finish_reason in ("error", "cancelled"):
                    error = _failure(job, ev.error)
                    break
                builder.push(ev.text, final=ev.finished)
            if out:
                yield b"".join(out)
                out.clear()
    builder.finish("completed" if job.finish_reason in ("eos", "stop") else "incomplete")
    event = ENDINGS.get(job.finish_reason, ("completed", "response.completed"))[1]
    yield b"".join(out) + writer.frame(event, {"response": response_body(head, builder, job, error, cached)})
