"""Tools in the OpenAI chat API: `tools` / `tool_choice` checked and handed to the chat template (as
transformers passes them), tool-call history rendered, and tool calls parsed back out of the model's text.

Parsing works as a splitter (orcd.server.reasoning's protocol) that yields (TOOL_CALL, json) pairs, the
json being {"name", "arguments"} with arguments a JSON string, as OpenAI returns them:
- Hermes style (Qwen2.5, Qwen3, Hermes, QwQ templates): `<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>` in the content; the text around the blocks stays content.
- gpt-oss Harmony: a `commentary` message addressed `to=functions.NAME`, its body the arguments.
A block that does not parse as a call is returned as content, as the model wrote it.
"""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Callable
from typing import Any

from orcd.errors import RequestError
from orcd.server.reasoning import CONTENT, Splitter, held_prefix, is_harmony, splitter_for
from orcd.tokenizer.harmony import TOOL_CALL, HarmonyParser

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


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


def _call_json(text: str) -> str | None:
    """A Hermes block's body -> the pair payload, or None if it is not a call."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return json.dumps({"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args)})


class _ContentScanner(abc.ABC):
    """Runs the content of an inner splitter (reasoning / content, or all content without one) through
    the subclass's `_scan`, which finds tool calls in it."""

    inner: Splitter | None

    def push(self, text: str) -> list[tuple[str, str]]:
        return self._scan(self.inner.push(text) if self.inner else [(CONTENT, text)], final=False)

    def flush(self) -> list[tuple[str, str]]:
        return self._scan(self.inner.flush() if self.inner else [], final=True)

    @abc.abstractmethod
    def _scan(self, pairs: list[tuple[str, str]], final: bool) -> list[tuple[str, str]]:
        """(kind, text) pairs in -> the same with tool-call text turned into TOOL_CALL pairs."""


class HermesTools(_ContentScanner):
    """Wraps a splitter (or none): its content is scanned for <tool_call> blocks."""

    def __init__(self, inner: Splitter | None = None):
        self.inner = inner
        self._buf, self._in_call = "", False
        self._called = False  # after a call, whitespace between blocks is not content

    def _scan(self, pairs: list[tuple[str, str]], final: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for kind, text in pairs:
            if kind != CONTENT:
                out.append((kind, text))
                continue
            self._buf += text
            while (at := self._buf.find(tag := CALL_CLOSE if self._in_call else CALL_OPEN)) >= 0:
                head, self._buf = self._buf[:at], self._buf[at + len(tag):]
                if self._in_call:
                    call = _call_json(head.strip())
                    out.append((TOOL_CALL, call) if call else (CONTENT, CALL_OPEN + head + CALL_CLOSE))
                    self._called = self._called or call is not None
                else:
                    self._content(head, out)
                self._in_call = not self._in_call
            if not self._in_call:
                keep = held_prefix(self._buf, CALL_OPEN)
                if len(self._buf) > keep:
                    self._content(self._buf[: len(self._buf) - keep], out)
                    self._buf = self._buf[len(self._buf) - keep:]
        if final and self._buf:  # an unclosed block or a held partial tag: text, as written
            out.append((CONTENT, (CALL_OPEN if self._in_call else "") + self._buf))
            self._buf, self._in_call = "", False
        return out

    def _content(self, text: str, out: list[tuple[str, str]]) -> None:
        if text and not (self._called and not text.strip()):
            out.append((CONTENT, text))


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


class LlamaJsonTools(_ContentScanner):
    """Llama 3.1-3.3 style: the whole answer is one JSON call `{"name": ..., "parameters": {...}}` (or
    several joined by `;`). Content that starts with `{` is held to the end and returned as calls if it
    parses as such, else as the text; other content streams as it comes."""

    def __init__(self, inner: Splitter | None = None):
        self.inner = inner
        self._held = ""  # content held while it may be a call
        self._plain = False  # decided: plain content from here on

    def _scan(self, pairs: list[tuple[str, str]], final: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for kind, text in pairs:
            if kind != CONTENT or self._plain:
                out.append((kind, text))
                continue
            self._held += text
            start = self._held.lstrip()
            if start and not start.startswith("{"):
                out.append((CONTENT, self._held))
                self._held, self._plain = "", True
        if final and self._held:
            found = [_call_json(self._held.strip())]
            if not found[0]:  # several calls, `;`-separated (Llama 3.2)
                found = [_call_json(part.strip()) for part in self._held.split(";") if part.strip()]
            if found and all(found):
                out += [(TOOL_CALL, c) for c in found if c]
            else:
                out.append((CONTENT, self._held))
            self._held, self._plain = "", True
        return out


def with_tools(split: Callable[[], Splitter] | None, harmony: bool,
               style: str = "hermes") -> Callable[[], Splitter]:
    if harmony:
        return HarmonyTools
    cls = LlamaJsonTools if style == "llama" else HermesTools
    return lambda: cls(split() if split is not None else None)


def tool_style(template: str | None) -> str:
    """`llama` for Llama 3.x templates (JSON calls with "parameters"), else `hermes` (<tool_call> blocks)."""
    t = template or ""
    return "llama" if "<|start_header_id|>" in t and '"parameters"' in t and CALL_OPEN not in t else "hermes"


def openai_calls(payloads: list[str], first_index: int = 0, stream: bool = False) -> list[dict]:
    """(TOOL_CALL, json) payloads -> OpenAI tool_calls entries (streamed deltas carry `index`)."""
    out = []
    for k, payload in enumerate(payloads):
        call = json.loads(payload)
        entry = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                 "function": {"name": call["name"], "arguments": call["arguments"]}}
        out.append({"index": first_index + k, **entry} if stream else entry)
    return out


def fields(pairs: list[tuple[str, str]], first_call: int = 0, stream: bool = True) -> dict:
    """[(kind, text)] -> the delta's (or message's) reasoning_content / content / tool_calls, only the kinds
    present."""
    out: dict = {}
    calls = [text for kind, text in pairs if kind == TOOL_CALL]
    for kind, text in pairs:
        if kind != TOOL_CALL:
            out[kind] = out.get(kind, "") + text
    if calls:
        out["tool_calls"] = openai_calls(calls, first_call, stream)
    return out


def message_fields(splitter: Splitter, text: str) -> dict:
    """A whole completion -> the message's content (None beside tool calls when empty),
    reasoning_content (None when there was none) and tool_calls (when there are any)."""
    out = fields(splitter.push(text) + splitter.flush(), stream=False)
    msg = {"content": out.get(CONTENT, ""), "reasoning_content": out.get("reasoning_content")}
    if "tool_calls" in out:
        msg["tool_calls"] = out["tool_calls"]
        msg["content"] = msg["content"] or None
    return msg


def tool_splitter(engine, prompt_ids: list[int]) -> Callable[[], Splitter]:
    """The splitter of a request that offered tools: the model's reasoning splitter with its calls parsed."""
    template = getattr(getattr(engine.tokenizer, "vocab", None), "chat_template", None)
    harmony = is_harmony(getattr(engine, "architecture", None), template)
    return with_tools(splitter_for(engine, prompt_ids), harmony, tool_style(template))
