"""OpenAI Responses API requests (POST /v1/responses, stateless): the body and its checks, and its
`instructions` + `input` items as chat-template messages and tools. What orcd does not do (stored
responses, built-in tools, images) is refused with a 400 naming the field, never dropped. Routes:
orcd/server/responses_routes.py; output items and stream events: orcd/server/responses_stream.py."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orcd.errors import RequestError
from orcd.server.reasoning import effort_kwargs, turn_reasoning
from orcd.server.schemas import Bool, Float, Int, Str
from orcd.server.text_checks import check_no_surrogates
from orcd.structured.grammars import response_format_grammar

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = {"input_text", "output_text"}
_KEYS = {"message": {"type", "role", "content", "id", "status", "phase"},
         "function_call": {"type", "call_id", "name", "arguments", "id", "status", "namespace"},
         "function_call_output": {"type", "call_id", "output", "id", "status"},
         "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"}}
_PART_KEYS = {"type", "text", "annotations", "logprobs"}
_TOOL_KEYS = {"type", "name", "description", "parameters", "strict"}
# include values that ask for data orcd has none of: encrypted reasoning (nothing is stored; the reasoning
# is returned as plain reasoning_text). Codex sends it on every request.
_IGNORED_INCLUDES = {"reasoning.encrypted_content"}


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Str | None = None
    input: Str | list[Any]
    instructions: Str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: Bool | None = None
    max_output_tokens: Int | None = None
    temperature: Float | None = None
    top_p: Float | None = None
    seed: Int | None = Field(default=None, description="orcd extension: same seed + input -> same output")
    stream: Bool = False
    store: Bool | None = None
    previous_response_id: Str | None = None
    conversation: Any = None
    background: Bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[Str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: Int | None = None
    max_tool_calls: Int | None = None
    prompt: Any = None
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, Str] | None = Field(default=None, description="returned in the response")
    user: Str | None = Field(default=None, description="accepted; recorded nowhere")
    safety_identifier: Str | None = Field(default=None, description="accepted; recorded nowhere")
    prompt_cache_key: Str | None = Field(default=None, description="accepted; prefix caching is automatic")
    prompt_cache_retention: Str | None = Field(default=None, description="accepted; prefix caching is "
                                               "automatic")
    service_tier: Str | None = Field(default=None, description="accepted; orcd has one tier")

    @model_validator(mode="before")
    @classmethod
    def _no_surrogates(cls, data: Any) -> Any:
        check_no_surrogates(data)
        return data


def _refuse(param: str, why: str) -> None:
    raise RequestError(f"{param}: {why}", param=param)


def check_request(body: ResponsesRequest) -> None:
    """Fields orcd cannot honour, refused by name."""
    if body.store:
        _refuse("store", "orcd keeps no responses (stateless): send store=false or leave it out")
    for name in ("previous_response_id", "conversation", "prompt"):
        if getattr(body, name) is not None:
            _refuse(name, "orcd keeps no responses or prompts (stateless): send the whole input")
    if body.background:
        _refuse("background", "background responses are not supported")
    for i, name in enumerate(body.include or []):
        if name not in _IGNORED_INCLUDES:
            _refuse(f"include.{i}", f"{name!r} is not supported (orcd returns no extra data)")
    if body.truncation == "auto":
        _refuse("truncation", "\"auto\" is not supported: input beyond the context is a 400")
    if body.top_logprobs:
        _refuse("top_logprobs", "logprobs are not supported on /v1/responses (use /v1/chat/completions)")
    if body.max_tool_calls is not None:
        _refuse("max_tool_calls", "is not supported")
    extra = sorted(set(body.reasoning or {}) - {"effort", "summary", "generate_summary"})
    if extra:
        _refuse(f"reasoning.{extra[0]}", "unrecognized field")
    effort_vars(body)
    if set(body.stream_options or {}) - {"include_obfuscation"}:
        _refuse("stream_options", "only include_obfuscation is accepted (orcd never pads events)")


def effort_vars(body: ResponsesRequest) -> dict[str, str]:
    """`reasoning.effort` as the chat template's reasoning_effort variable (reasoning.effort_kwargs)."""
    return effort_kwargs((body.reasoning or {}).get("effort"), "reasoning.effort")


def text_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as the chat API's response_format (None: plain text)."""
    extra = sorted(set(text or {}) - {"format", "verbosity"})
    if extra:
        _refuse(f"text.{extra[0]}", "unrecognized field")
    fmt = (text or {}).get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    _refuse("text.format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}")
    return None


def format_grammar(text: dict[str, Any] | None) -> str | None:
    """text.format's grammar (orcd.structured), None for plain text; errors name `text.format.…`."""
    try:
        return response_format_grammar(text_format(text))
    except RequestError as err:
        param = err.param or ""
        if not param.startswith("response_format"):
            raise
        at = "text.format" + param.removeprefix("response_format").removeprefix(".json_schema")
        raise RequestError(str(err).replace(param, at), param=at) from err


def template_tools(tools: list[Any] | None, tool_choice: Any) -> list[dict] | None:
    """Responses function tools ({"type": "function", "name", "parameters", ...}) in the chat template's
    shape ({"type": "function", "function": {...}}), or None when there are none."""
    if tool_choice not in (None, "auto", "none", "required") and not (
            isinstance(tool_choice, dict) and tool_choice.get("type") == "function"
            and isinstance(tool_choice.get("name"), str) and set(tool_choice) == {"type", "name"}):
        _refuse("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"name\": ...}")
    out = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            _refuse(f"tools.{i}.type", f"only function tools are supported (got {kind!r})")
        if not isinstance(t.get("name"), str) or not t["name"]:
            _refuse(f"tools.{i}.name", "a function tool needs a name")
        if set(t) - _TOOL_KEYS:
            _refuse(f"tools.{i}.{sorted(set(t) - _TOOL_KEYS)[0]}", "unrecognized field of a function tool")
        out.append({"type": "function", "function": {k: v for k, v in t.items() if k != "type"}})
    if (tool_choice == "required" or isinstance(tool_choice, dict)) and not out:
        _refuse("tool_choice", "needs tools")
    if isinstance(tool_choice, dict) and tool_choice["name"] not in [t["function"]["name"] for t in out]:
        _refuse("tool_choice.name", f"no tool named {tool_choice['name']!r}")
    return out or None


def chat_tool_choice(tool_choice: Any) -> Any:
    """The Responses tool_choice in the chat API's shape (a named function nests under "function")."""
    if isinstance(tool_choice, dict):
        return {"type": "function", "function": {"name": tool_choice["name"]}}
    return tool_choice


def _text(content: Any, at: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        _refuse(at, "must be a string or a list of content parts")
    parts = []
    for j, part in enumerate(content):
        where = f"{at}.{j}"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in _TEXT_PARTS:
            _refuse(f"{where}.type", f"only input_text and output_text parts are supported (got {kind!r})")
        if not isinstance(part.get("text"), str):
            _refuse(f"{where}.text", "a text part needs a string `text`")
        if set(part) - _PART_KEYS:
            _refuse(f"{where}.{sorted(set(part) - _PART_KEYS)[0]}", "unrecognized field of a content part")
        parts.append(part["text"])
    return "".join(parts)


def _call(item: dict, at: str) -> dict:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            _refuse(f"{at}.{key}", "a function_call item needs string call_id, name and arguments")
    try:
        args = json.loads(item["arguments"] or "{}")
    except json.JSONDecodeError:
        args = item["arguments"]  # a template gets the string the client sent
    return {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": args}}


def _reasoning_text(content: Any, at: str) -> str:
    """A reasoning item's `content` ([{"type": "reasoning_text", "text"}], as orcd returns it) joined;
    absent or empty: "" (its summary is not the reasoning)."""
    if content is None:
        return ""
    if not isinstance(content, list) or not all(
            isinstance(p, dict) and p.get("type") == "reasoning_text" and isinstance(p.get("text"), str)
            for p in content):
        _refuse(at, "must be a list of {\"type\": \"reasoning_text\", \"text\"} parts")
    return "".join(p["text"] for p in content)


def input_messages(instructions: str | None, items: str | list[Any]) -> list[dict]:
    """`instructions` and the input items -> chat-template messages: a function_call joins the assistant
    turn before it (or starts one), a function_call_output is a `tool` message. A reasoning item's text
    is the `reasoning_content` (and `thinking`) of the assistant turn it precedes, as on the chat route:
    the template decides whether to render it (Qwen3 does within a tool loop, and drops earlier turns')."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    thought = ""  # reasoning items' text, for the next assistant turn
    for i, item in enumerate(items):
        at = f"input.{i}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if not isinstance(kind, str) or kind not in _KEYS:  # JSON arrays and objects are unhashable
            _refuse(f"{at}.type", f"input items may be message, function_call, function_call_output or "
                    f"reasoning (got {kind!r})")
        if set(item) - _KEYS[kind]:
            _refuse(f"{at}.{sorted(set(item) - _KEYS[kind])[0]}", f"unrecognized field of a {kind} item")
        if kind == "reasoning":
            thought += _reasoning_text(item.get("content"), f"{at}.content")
            continue
        if kind == "message":
            role = _ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
            if role is None:
                _refuse(f"{at}.role", "must be user, system, developer or assistant")
            out.append({"role": role, "content": _text(item.get("content"), f"{at}.content")})
        elif kind == "function_call":
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(_call(item, at))
        if out and out[-1]["role"] == "assistant" and thought and "thinking" not in out[-1]:
            out[-1] |= turn_reasoning(thought)
        thought = ""  # reasoning not followed by an assistant turn is dropped
        if kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                _refuse(f"{at}.call_id", "a function_call_output item needs a string call_id")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _text(item.get("output"), f"{at}.output")})
    if not any(m["role"] != "system" for m in out):
        _refuse("input", "needs at least one message or function_call_output item")
    return out
