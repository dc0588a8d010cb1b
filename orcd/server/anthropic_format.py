"""Anthropic Messages API shapes: the request body and its checks, errors, and the response content built
from engine events (whole, or as Anthropic's stream events). Routes: orcd/server/anthropic_routes.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orcd.errors import RequestError
from orcd.server.anthropic_tools import (
    earlier_thinking,
    has_tool_blocks,
    history,
    new_tool_use_id,
    template_tools,
    tool_use_block,
)
from orcd.server.errors import MAX_MESSAGE, APIError
from orcd.server.reasoning import REASONING, Splitter, effort_kwargs
from orcd.server.schemas import Bool, Float, Int, Str
from orcd.server.sse import sse_event
from orcd.server.text_checks import check_no_surrogates, printable
from orcd.server.tool_scanners import CALL_ARGS, CALL_BEGIN
from orcd.structured.grammars import json_schema_grammar
from orcd.tokenizer.harmony import TOOL_CALL

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                503: "overloaded_error", 529: "overloaded_error"}
STOP_REASONS = {"eos": "end_turn", "stop": "stop_sequence", "length": "max_tokens", "cancelled": "cancelled"}
_BLOCK_KEYS = {"type", "text", "cache_control", "citations"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnthropicMessage(_Strict):
    role: Literal["user", "assistant"]
    content: Str | list[dict[str, Any]]


class MessagesRequest(_Strict):
    model: Str
    max_tokens: Int
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: Str | list[dict[str, Any]] | None = None
    stop_sequences: list[Str] | None = None
    temperature: Float | None = None
    top_p: Float | None = None
    top_k: Int | None = None
    seed: Int | None = Field(default=None, description="orcd extension: same seed + input -> same output")
    stream: Bool = False
    metadata: dict[str, Any] | None = Field(default=None, description="accepted; recorded nowhere")
    service_tier: Str | None = Field(default=None, description="accepted; orcd has one tier")
    cache_control: dict[str, Any] | None = Field(default=None, description="accepted; prefix caching is "
                                                 "automatic")
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_surrogates(cls, data: Any) -> Any:
        check_no_surrogates(data)
        return data


class CountTokensRequest(MessagesRequest):
    max_tokens: Int | None = None  # type: ignore[assignment]


def error_body(status: int, message: str) -> dict:
    message = printable(" ".join(message.split()))
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(err: APIError) -> bytes:
    return sse_event(error_body(err.status, err.message), "error")


def block_text(blocks: str | list[dict[str, Any]], where: str, role: str = "user") -> str:
    """A content string, or text blocks joined (an assistant turn's earlier thinking left out); any other
    block is refused naming where it is."""
    if isinstance(blocks, str):
        return blocks
    parts = []
    for j, block in enumerate(blocks):
        at = f"{where}.{j}"
        if earlier_thinking(block, role, at):
            continue
        if block.get("type") != "text":
            raise RequestError(f"{at}.type: only text content blocks are supported (got "
                               f"{block.get('type')!r})", param=f"{at}.type")
        if not isinstance(block.get("text"), str):
            raise RequestError(f"{at}.text: a text block needs a string `text`", param=f"{at}.text")
        extra = sorted(set(block) - _BLOCK_KEYS)
        if extra:
            at = f"{at}.{extra[0]}"
            raise RequestError(f"{at}: unrecognized field of a text block", param=at)
        parts.append(block["text"])
    return "".join(parts)


def template_messages(body: MessagesRequest) -> tuple[list[dict], str | None, list[dict] | None, dict]:
    """(chat-template messages, the assistant prefill to continue or None, the template's tools or None,
    other template variables: output_config's effort). Unsupported features are refused with a 400
    naming the field, never dropped."""
    tools = template_tools(body.tools, body.tool_choice)
    wants_thinking(body)
    variables, _grammar = output_options(body)
    out = []
    if body.system is not None:
        out.append({"role": "system", "content": block_text(body.system, "system", "system")})
    for i, m in enumerate(body.messages):
        if has_tool_blocks(m.content):
            out += history(m.role, m.content, f"messages.{i}.content")
        else:
            out.append({"role": m.role, "content": block_text(m.content, f"messages.{i}.content", m.role)})
    prefill = None
    if out[-1]["role"] == "assistant" and "tool_calls" not in out[-1]:  # a prefill: continued
        prefill = out.pop()["content"]
        if not any(m["role"] == "user" for m in out):
            raise RequestError("messages: needs a user message before the assistant's", param="messages")
    return out, prefill, tools, variables


THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")


def wants_thinking(body: MessagesRequest) -> bool:
    """Whether the response carries the model's thinking as `thinking` blocks: `thinking.type` enabled,
    adaptive or between_tools, unless `display` is "omitted". orcd has no thinking budget: the model
    thinks as its chat template makes it (`budget_tokens` is checked, not enforced)."""
    thinking = body.thinking or {"type": "disabled"}
    kind, display = thinking.get("type"), thinking.get("display")
    extra = sorted(set(thinking) - {"type", "budget_tokens", "display"})
    if extra:
        raise RequestError(f"thinking.{extra[0]}: unrecognized field", param=f"thinking.{extra[0]}")
    if kind not in THINKING_TYPES:
        raise RequestError(f"thinking.type: must be one of {', '.join(THINKING_TYPES)}",
                           param="thinking.type")
    if not isinstance(thinking.get("budget_tokens", 0), int):
        raise RequestError("thinking.budget_tokens: must be an integer", param="thinking.budget_tokens")
    if display not in (None, "summarized", "omitted"):
        raise RequestError("thinking.display: must be \"summarized\" or \"omitted\"",
                           param="thinking.display")
    return kind != "disabled" and display != "omitted"


ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")  # Anthropic's output_config.effort values


def output_options(body: MessagesRequest) -> tuple[dict[str, str], str | None]:
    """`output_config`: (chat template variables: `effort` as `reasoning_effort`, orcd.server.reasoning;
    the grammar of `format` {"type": "json_schema", "schema"} or None). `format` with a forced tool_choice
    is refused (the response is then a tool call)."""
    config = body.output_config or {}
    extra = sorted(set(config) - {"effort", "format"})
    if extra:
        raise RequestError(f"output_config.{extra[0]}: unrecognized field", param=f"output_config.{extra[0]}")
    variables = effort_kwargs(config.get("effort"), "output_config.effort", ANTHROPIC_EFFORTS)
    fmt = config.get("format")
    if fmt is None:
        return variables, None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or set(fmt) - {"type", "schema"}:
        raise RequestError("output_config.format: must be {\"type\": \"json_schema\", \"schema\": {...}}",
                           param="output_config.format")
    if (body.tool_choice or {}).get("type") in ("any", "tool"):
        raise RequestError("output_config.format: cannot be combined with tool_choice any or tool",
                           param="output_config.format")
    return variables, json_schema_grammar(fmt.get("schema", True), "output_config.format.schema")


class ContentBuilder:
    """Text increments -> content blocks: a reasoning model's thinking (kept only when the request enabled
    thinking) as `thinking` blocks, the rest as `text` blocks; a new block whenever the kind changes.
    `on_event(name, data)` receives the stream events; `blocks` is the whole content at the end."""

    def __init__(self, split: Callable[[], Splitter] | None, thinking: bool,
                 on_event: Callable[[str, dict], None] | None = None):
        self.splitter = split() if split is not None else None
        self.thinking, self.on_event = thinking, on_event
        self.blocks: list[dict] = []
        self._open = False
        self._call: dict | None = None  # the tool_use block whose input streams (input_json_delta)

    def push(self, text: str, final: bool = False) -> None:
        if self.splitter is None:
            pairs = [("content", text)] if text else []
        else:
            pairs = self.splitter.push(text) + (self.splitter.flush() if final else [])
        for kind, piece in pairs:
            if kind == CALL_BEGIN:
                self._begin_tool_use(piece)
            elif kind == CALL_ARGS and self._call is not None:
                self._emit("content_block_delta", {"index": len(self.blocks) - 1, "delta": {
                    "type": "input_json_delta", "partial_json": piece}})
            elif kind == TOOL_CALL:
                self._tool_use(piece)
            elif kind != REASONING or self.thinking:
                self._add("thinking" if kind == REASONING else "text", piece)
        if final:
            if not any(b["type"] in ("text", "tool_use") for b in self.blocks):
                self._add("text", "")
            self._close()

    def _add(self, kind: str, piece: str) -> None:
        if not self.blocks or self.blocks[-1]["type"] != kind or not self._open:
            self._close()
            block = {"type": "text", "text": ""} if kind == "text" else {
                "type": "thinking", "thinking": "", "signature": ""}
            self.blocks.append(block)
            self._open = True
            self._emit("content_block_start", {"index": len(self.blocks) - 1, "content_block": dict(block)})
        if piece:
            self.blocks[-1][kind] += piece
            delta = {"type": "text_delta", "text": piece} if kind == "text" else {
                "type": "thinking_delta", "thinking": piece}
            self._emit("content_block_delta", {"index": len(self.blocks) - 1, "delta": delta})

    @property
    def called(self) -> bool:
        return any(b["type"] == "tool_use" for b in self.blocks)

    def _begin_tool_use(self, name: str) -> None:
        """A call whose input streams: its block opens with the name, input_json_deltas follow (the
        arguments as the model writes them), its TOOL_CALL closes it."""
        self._close()
        self._call = {"type": "tool_use", "id": new_tool_use_id(), "name": name, "input": {}}
        self.blocks.append(self._call)
        self._emit("content_block_start", {"index": len(self.blocks) - 1, "content_block": dict(self._call)})

    def _tool_use(self, payload: str) -> None:
        """A call's end: a streamed one gets its input; a whole one opens, carries its input as one
        input_json_delta, and closes."""
        index = len(self.blocks) - 1
        if self._call is not None:
            self._call["input"] = tool_use_block(payload)["input"]
            self._call = None
            self._emit("content_block_stop", {"index": index})
            return
        self._close()
        block = tool_use_block(payload)
        self.blocks.append(block)
        index = len(self.blocks) - 1
        self._emit("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
        self._emit("content_block_delta", {"index": index, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        self._emit("content_block_stop", {"index": index})

    def _close(self) -> None:
        if self._open:
            self._open = False
            self._emit("content_block_stop", {"index": len(self.blocks) - 1})

    def _emit(self, name: str, data: dict) -> None:
        if self.on_event is not None:
            self.on_event(name, {"type": name, **data})


def matched_stop(decode: Callable[[list[int]], str], token_ids: list[int], text: str,
                 stops: tuple[str, ...]) -> str | None:
    """Which stop sequence ended the text: the one that follows the returned text in the full decode."""
    full = decode(token_ids)
    return next((s for s in stops if full.startswith(s, len(text))), None) if full.startswith(text) else None
