"""The OpenAI fields orcd refuses (400 naming them, unless given at their neutral value), and the
SamplingParams a request runs with. Every field accepted is honoured; none is silently ignored."""

from __future__ import annotations

import dataclasses

from orcd.engine.sampling_params import MAX_LOGPROBS, SamplingParams
from orcd.errors import RequestError
from orcd.server.fork import MAX_N
from orcd.server.prep import build_sampling, precheck_sampling
from orcd.server.reasoning import template_kwargs
from orcd.server.schemas import ChatCompletionRequest, CompletionRequest
from orcd.server.tools import check_tools


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
    if body.response_format is not None and body.response_format.get("type") != "text":
        refuse("response_format", "other than {\"type\": \"text\"} is not supported")
    if body.functions:
        refuse("functions", "(deprecated) is not supported: send tools")
    if body.function_call not in (None, "none"):
        refuse("function_call", "(deprecated) is not supported: send tool_choice")
    check_tools(body.tools, body.tool_choice, body.parallel_tool_calls)
    template_kwargs(body.chat_template_kwargs)
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


def chat_sampling(body: ChatCompletionRequest, max_tokens: int) -> SamplingParams:
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    return dataclasses.replace(build_sampling(body, max_tokens), logprobs=logprobs)


def completion_sampling(body: CompletionRequest, max_tokens: int) -> SamplingParams:
    return dataclasses.replace(build_sampling(body, max_tokens), logprobs=body.logprobs)
