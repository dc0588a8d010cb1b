"""Tools in the OpenAI chat API: `tools` / `tool_choice` checked and handed to the chat template (as
transformers passes them), tool-call history rendered, and tool calls parsed back out of the model's text.

Parsing works as a splitter (orcd.server.reasoning's protocol) that yields (TOOL_CALL, json) pairs, the
json being {"name", "arguments"} with arguments a JSON string, as OpenAI returns them. The format is the
one the chat template teaches (tool_style): Hermes / Qwen3-Coder `<tool_call>` blocks, Llama 3.x JSON and
Mistral `[TOOL_CALLS]` are scanned by orcd.server.tool_scanners, .llama_calls and .mistral_calls; gpt-oss
Harmony's calls are `commentary` messages addressed `to=functions.NAME`, their body the arguments. Hermes
and Llama JSON calls also stream their arguments ((CALL_BEGIN, name), (CALL_ARGS, piece)... before the
call's TOOL_CALL): ToolDeltas turns them into OpenAI's tool-call deltas.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

from orcd.errors import RequestError
from orcd.server.llama_calls import LlamaJsonTools
from orcd.server.mistral_calls import MISTRAL_CALLS, MistralTools
from orcd.server.reasoning import CONTENT, Splitter, is_harmony, splitter_for
from orcd.server.tool_scanners import (
    CALL_ARGS,
    CALL_BEGIN,
    CALL_OPEN,
    HermesTools,
    coder_parser,
)
from orcd.tokenizer.harmony import TOOL_CALL, HarmonyParser

__all__ = ["HarmonyTools", "HermesTools", "LlamaJsonTools", "MistralTools", "ToolDeltas", "check_tools",
           "fields", "history_message", "message_fields", "openai_calls", "template_call_ids",
           "tool_splitter", "tool_style", "with_tools"]
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")


def check_tools(tools: list[Any] | None, tool_choice: Any, parallel: bool | None) -> list[dict] | None:
    """The tools to render (None: none given), or a 400 naming the field. tool_choice `auto` and `none`
    are honoured; `required` and a named function would need constrained decoding, not there yet."""
    if not tools:
        if tool_choice not in (None, "none", "auto"):
            raise RequestError("tool_choice: needs tools", param="tool_choice")
        return None
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools.{i}: must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                               f"\"parameters\": ...}}}}", param=f"tools.{i}")
    if tool_choice not in (None, "auto", "none"):
        raise RequestError("tool_choice: only \"auto\" and \"none\" are supported (forcing a call needs "
                           "constrained decoding, not implemented yet)", param="tool_choice")
    return [{"type": "function", "function": t["function"]} for t in tools]


def history_message(m, where: str, base: Callable[[Any], dict]) -> dict:
    """One OpenAI message -> template message, with tool calls (arguments as objects, as templates
    expect) and `tool` results; `base` converts the plain part."""
    if m.role == "tool":
        if not m.tool_call_id:
            at = f"{where}.tool_call_id"
            raise RequestError(f"{at} is required for a tool message", param=at)
        plain = base(m.model_copy(update={"role": "user", "tool_call_id": None}))
        return {**plain, "role": "tool", "tool_call_id": m.tool_call_id}
    if m.role == "assistant" and m.tool_calls:
        calls = []
        for j, call in enumerate(m.tool_calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                at = f"{where}.tool_calls.{j}"
                raise RequestError(f"{at}: needs function.name", param=at)
            args = fn.get("arguments") or "{}"
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                pass  # a template gets the string the client sent
            calls.append({"id": call.get("id"), "type": "function",
                          "function": {"name": fn["name"], "arguments": args}})
        plain = base(m.model_copy(update={"tool_calls": None}))
        return {**plain, "tool_calls": calls}
    return base(m)


class HarmonyTools:
    """Harmony with tools: each closed `to=functions.NAME` message is one call."""

    def __init__(self) -> None:
        self._p = HarmonyParser()
        self._seen = 0

    def push(self, text: str) -> list[tuple[str, str]]:
        return self._calls([p for p in self._p.push(text) if p[0] != TOOL_CALL])

    def flush(self) -> list[tuple[str, str]]:
        return self._calls([p for p in self._p.flush() if p[0] != TOOL_CALL])

    def _calls(self, out: list[tuple[str, str]]) -> list[tuple[str, str]]:
        for m in self._p.messages[self._seen:]:
            if m.kind == TOOL_CALL and m.recipient:
                name = m.recipient.removeprefix("functions.")
                out.append((TOOL_CALL, json.dumps({"name": name, "arguments": m.content.strip() or "{}"})))
        self._seen = len(self._p.messages)
        return out


def with_tools(split: Callable[[], Splitter] | None, harmony: bool, style: str = "hermes",
               tools: list[dict] | None = None) -> Callable[[], Splitter]:
    """A factory of tool-call splitters of `style` (tool_style) around the reasoning splitter `split`;
    `tools` (the request's, OpenAI function shape) type Qwen3-Coder's parameter values."""
    if harmony or style == "harmony":
        return HarmonyTools
    if style == "coder":
        parse = coder_parser(tools)
        return lambda: HermesTools(split() if split is not None else None, parse)
    cls = {"llama": LlamaJsonTools, "mistral": MistralTools}.get(style, HermesTools)
    return lambda: cls(split() if split is not None else None)


def tool_style(template: str | None) -> str:
    """How the template's model writes calls: `coder` (Qwen3-Coder XML in <tool_call>), `mistral`
    ([TOOL_CALLS]), `llama` (Llama 3.x JSON with "parameters"), else `hermes` (JSON in <tool_call>)."""
    t = template or ""
    if CALL_OPEN in t and "<function=" in t and "<parameter=" in t:
        return "coder"
    if MISTRAL_CALLS in t:
        return "mistral"
    return "llama" if "<|start_header_id|>" in t and '"parameters"' in t and CALL_OPEN not in t else "hermes"


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def openai_calls(payloads: list[str]) -> list[dict]:
    """(TOOL_CALL, json) payloads -> a message's OpenAI tool_calls entries."""
    out = []
    for payload in payloads:
        call = json.loads(payload)
        out.append({"id": _call_id(), "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]}})
    return out


class ToolDeltas:
    """One streamed choice's OpenAI tool_calls deltas: a streamed call's entry (id, name, arguments "")
    when it begins, then `{"index", "function": {"arguments": piece}}` as its arguments come; a call
    returned whole is one entry. Entries of one index in one delta are merged."""

    def __init__(self) -> None:
        self.count = 0  # calls begun so far (the next one's index)
        self._open = False  # a streamed call's TOOL_CALL is still to come

    def entries(self, pairs: list[tuple[str, str]]) -> list[dict]:
        by_index: dict[int, dict] = {}
        for kind, text in pairs:
            if kind == CALL_BEGIN or (kind == TOOL_CALL and not self._open):
                call = {"name": text, "arguments": ""} if kind == CALL_BEGIN else json.loads(text)
                by_index[self.count] = {"index": self.count, "id": _call_id(), "type": "function",
                                        "function": {"name": call["name"], "arguments": call["arguments"]}}
                self.count += 1
                self._open = kind == CALL_BEGIN
            elif kind == CALL_ARGS:
                entry = by_index.setdefault(self.count - 1, {"index": self.count - 1, "function": {}})
                entry["function"]["arguments"] = entry["function"].get("arguments", "") + text
            elif kind == TOOL_CALL:  # the streamed call's end: its arguments were all sent
                self._open = False
        return list(by_index.values())


def fields(pairs: list[tuple[str, str]], deltas: ToolDeltas | None = None) -> dict:
    """[(kind, text)] -> a streamed delta's (with `deltas`, the choice's call state) or a whole message's
    reasoning_content / content / tool_calls, only the kinds present."""
    out: dict = {}
    for kind, text in pairs:
        if kind not in (TOOL_CALL, CALL_BEGIN, CALL_ARGS):
            out[kind] = out.get(kind, "") + text
    calls = deltas.entries(pairs) if deltas is not None else \
        openai_calls([text for kind, text in pairs if kind == TOOL_CALL])
    if calls:
        out["tool_calls"] = calls
    return out


def message_fields(splitter: Splitter, text: str) -> dict:
    """A whole completion -> the message's content (None beside tool calls when empty),
    reasoning_content (None when there was none) and tool_calls (when there are any)."""
    out = fields(splitter.push(text) + splitter.flush())
    msg = {"content": out.get(CONTENT, ""), "reasoning_content": out.get("reasoning_content")}
    if "tool_calls" in out:
        msg["tool_calls"] = out["tool_calls"]
        msg["content"] = msg["content"] or None
    return msg


def tool_splitter(engine, prompt_ids: list[int], tools: list[dict] | None = None) -> Callable[[], Splitter]:
    """The splitter of a request that offered `tools`: the model's reasoning splitter with its calls
    parsed in the format its chat template teaches."""
    template = getattr(getattr(engine.tokenizer, "vocab", None), "chat_template", None)
    harmony = is_harmony(getattr(engine, "architecture", None), template)
    return with_tools(splitter_for(engine, prompt_ids), harmony, tool_style(template), tools)


def template_call_ids(messages: list[dict], template: str | None) -> list[dict]:
    """Mistral's templates refuse tool-call ids that are not 9 alphanumeric characters (OpenAI's are
    `call_…`, Anthropic's `toolu_…`): for them every other id becomes 9 hex digits of its hash, the same
    in the call and in its result. Other templates get the messages as they are."""
    if MISTRAL_CALLS not in (template or ""):
        return messages

    def fix(cid):
        return cid if not isinstance(cid, str) or _MISTRAL_ID.fullmatch(cid) else \
            hashlib.sha256(cid.encode()).hexdigest()[:9]

    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [{**c, "id": fix(c.get("id"))} for c in m["tool_calls"]]}
        if m.get("tool_call_id") is not None:
            m = {**m, "tool_call_id": fix(m["tool_call_id"])}
        out.append(m)
    return out
