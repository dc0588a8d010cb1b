"""The OpenAI fields orcd refuses (400 naming them, unless given at their neutral value), and the
SamplingParams a request runs with. Every field accepted is honoured; none is silently ignored."""

from __future__ import annotations

import dataclasses
from typing import Any

from anyio import to_thread

from orcd.engine.sampling_params import MAX_LOGPROBS, SamplingParams
from orcd.errors import RequestError
from orcd.server.fork import MAX_N
from orcd.server.prep import build_sampling, precheck_sampling
from orcd.server.reasoning import is_harmony, template_kwargs
from orcd.server.schemas import ChatCompletionRequest, CompletionRequest
from orcd.server.tools import check_tools, tool_style
from orcd.structured.grammars import response_format_grammar
from orcd.structured.tool_grammar import forced_tool_grammar


def refuse(param: str, why: str = "is not supported by orcd") -> None:
    raise RequestError(f"{param}{why}" if why.startswith("=") else f"{param} {why}", param=param)


def _in_range(param: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        refuse(param, f"={value} is out of range: {low}..{high}")


def check_common(body: CompletionRequest | ChatCompletionRequest) -> None:
    _in_range("n", body.n, 1, MAX_N)
    if body.logit_bias:
        refuse("logit_bias")
    if body.stream_options is not None and not body.stream:
        refuse("stream_options", "is only allowed with stream=true")
    precheck_sampling(body)


def check_chat(body: ChatCompletionRequest) -> None:
    check_common(body)
    _in_range("top_logprobs", body.top_logprobs, 0, MAX_LOGPROBS)
    if body.top_logprobs is not None and not body.logprobs:
        refuse("top_logprobs", "requires logprobs=true")
    chat_grammar(body, checked_tools(body))  # a bad schema / grammar / forced choice: 400 before any work
    if body.functions:
        refuse("functions", "(deprecated) is not supported: send tools")
    if body.function_call not in (None, "none"):
        refuse("function_call", "(deprecated) is not supported: send tool_choice")
    if body.store:
        refuse("store", "true is not supported: orcd keeps no completions")
    template_kwargs(body.chat_template_kwargs, body.reasoning_effort)
    if body.max_tokens is not None and body.max_completion_tokens not in (None, body.max_tokens):
        refuse("max_completion_tokens", "disagrees with max_tokens")


def check_completion(body: CompletionRequest) -> None:
    check_common(body)
    _in_range("logprobs", body.logprobs, 0, MAX_LOGPROBS)
    if body.logprobs is not None and body.echo:
        refuse("echo", "with logprobs is not supported (prompt logprobs are not computed)")
    if body.best_of not in (None, body.n):
        refuse("best_of", f"={body.best_of}: only best_of equal to n is supported (no ranking of choices)")
    if body.suffix:
        refuse("suffix")
    response_format_grammar(body.response_format)


def forced(tool_choice: Any) -> bool:
    """tool_choice "required" or a named function: the reply must be a tool call."""
    return tool_choice == "required" or isinstance(tool_choice, dict)


def checked_tools(body: ChatCompletionRequest) -> list[dict] | None:
    """The request's tools in the template's shape (None: none), every tool_choice form checked."""
    force = forced(body.tool_choice)
    tools = check_tools(body.tools, "auto" if force else body.tool_choice, body.parallel_tool_calls)
    if force and not tools:
        refuse("tool_choice", "needs tools")
    return tools


def call_style(engine) -> str:
    """The tool-call format a forced call is written in: the chat template's (orcd.server.tools)."""
    template = getattr(getattr(engine.tokenizer, "vocab", None), "chat_template", None)
    return "harmony" if is_harmony(getattr(engine, "architecture", None), template) else tool_style(template)


def chat_grammar(body: ChatCompletionRequest, tools: list[dict] | None, style: str = "hermes") -> str | None:
    """The grammar a chat request is held to: its response_format's, or with tool_choice "required" / a
    named function one call in the template's tool-call `style` (orcd.server.tools.tool_style), one or
    more with parallel_tool_calls=true where the format allows (tool_grammar); None."""
    grammar = response_format_grammar(body.response_format)
    if not forced(body.tool_choice):
        return grammar
    if grammar is not None:
        refuse("response_format", "cannot be combined with tool_choice \"required\" or a named function")
    return forced_tool_grammar(tools or [], body.tool_choice, style, body.parallel_tool_calls is True)


async def grammar_ready(engine, sampling: SamplingParams) -> SamplingParams:
    """For a request with a grammar: the model's grammar backend built off the event loop (once per model:
    ~1.5 s for a 152k vocabulary; the engine's validate, on the loop, then finds it ready)."""
    if sampling.grammar is not None:
        llm = getattr(engine, "engine", engine)  # the AsyncEngine's LLMEngine
        await to_thread.run_sync(lambda: llm.grammars().lltok)
    return sampling


def chat_sampling(body: ChatCompletionRequest, max_tokens: int, grammar: str | None = None) -> SamplingParams:
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    return dataclasses.replace(build_sampling(body, max_tokens), logprobs=logprobs, grammar=grammar)


def completion_sampling(body: CompletionRequest, max_tokens: int) -> SamplingParams:
    return dataclasses.replace(build_sampling(body, max_tokens), logprobs=body.logprobs,
                               grammar=response_format_grammar(body.response_format))
