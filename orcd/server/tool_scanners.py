"""Tool-call scanners: splitters (orcd.server.reasoning's protocol) that wrap a model's reasoning splitter
(or none) and turn the calls written in its content into (TOOL_CALL, json) pairs, the json being
{"name", "arguments"} with arguments a JSON string, as OpenAI returns them. Text deltas may cut a tag or a
call anywhere; a possible partial tag is held back until it completes or cannot. Text that does not parse
as a call is returned as content, as the model wrote it.

- Hermes (Qwen2.5, Qwen3, QwQ, Hermes): `<tool_call>{"name": .., "arguments": {..}}</tool_call>` blocks.
  Their arguments stream as the model writes them: once `{"name": "NAME", "arguments": {` is written
  the scanner returns (CALL_BEGIN, NAME), then (CALL_ARGS, piece) pairs with the arguments' raw text,
  then the whole (TOOL_CALL, json) whose arguments are exactly those pieces joined (a call cut by the
  end of the text ends with the arguments written so far). Whole-text readers look at TOOL_CALL only.
- Qwen3-Coder XML (Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5): `<tool_call><function=NAME>
  <parameter=P>value</parameter></function></tool_call>`; values are typed by the tool's JSON schema.
- Llama 3.x JSON calls: orcd.server.llama_calls.
- Mistral `[TOOL_CALLS]` calls: orcd.server.mistral_calls.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Callable

from orcd.server.reasoning import CONTENT, Splitter, held_prefix
from orcd.tokenizer.harmony import TOOL_CALL

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_BEGIN, CALL_ARGS = "tool_call_begin", "tool_call_args"  # a streamed call's name, its argument pieces
# the head of a JSON call up to its arguments object (whose `{` is left to the arguments' text)
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,'
                        r'\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)

Pairs = list[tuple[str, str]]


def call_payload(name: str, args) -> str:
    """The TOOL_CALL pair's text: {"name", "arguments"} with arguments a JSON string."""
    return json.dumps({"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)})


def json_call(text: str) -> str | None:
    """A JSON call object ({"name", "arguments" | "parameters"}) -> the pair payload, or None."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    return call_payload(obj["name"], obj.get("arguments", obj.get("parameters", {})))


def json_end(text: str, start: int) -> int | None:
    """Index just past the JSON object or array opening at text[start] (brackets matched outside
    strings), or None while it is not closed yet."""
    depth, in_str, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            escaped, in_str = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class ArgsStream:
    """A JSON call being written (`{"name": "NAME", "arguments" | "parameters": {...`): its name, where its
    arguments object starts in the scanned text, and how much of the arguments has been returned."""

    def __init__(self, name: str, args_at: int):
        self.name, self.args_at, self.sent = name, args_at, 0

    @classmethod
    def start(cls, text: str, at: int, out: Pairs) -> ArgsStream | None:
        """The call whose head is written at text[at:] (out gets its CALL_BEGIN), or None (not yet / not
        one with its name first)."""
        m = _CALL_HEAD.match(text, at)
        if m is None:
            return None
        out.append((CALL_BEGIN, json.loads(m.group(1))))
        return cls(out[-1][1], m.end())

    def args(self, text: str) -> str:
        """Its arguments text: the JSON object, or all there is while it is open."""
        end = json_end(text, self.args_at)
        return text[self.args_at: end if end is not None else len(text)]

    def more(self, text: str, out: Pairs) -> None:
        """The arguments written since the last call (`text` holds no partial tag that may follow them)."""
        args = self.args(text)
        if len(args) > self.sent:
            out.append((CALL_ARGS, args[self.sent:]))
            self.sent = len(args)

    def close(self, text: str, out: Pairs) -> None:
        """The call ends at the end of `text`: its last pieces, then the whole TOOL_CALL."""
        self.more(text, out)
        out.append((TOOL_CALL, call_payload(self.name, self.args(text))))


class ContentScanner(abc.ABC):
    """Runs the content of an inner splitter (reasoning / content, or all content without one) through
    the subclass's `_scan`, which finds tool calls in it."""

    inner: Splitter | None

    def push(self, text: str) -> Pairs:
        return self._scan(self.inner.push(text) if self.inner else [(CONTENT, text)], final=False)

    def flush(self) -> Pairs:
        return self._scan(self.inner.flush() if self.inner else [], final=True)

    def _scan(self, pairs: Pairs, final: bool) -> Pairs:
        out: Pairs = []
        for kind, text in pairs:
            if kind == CONTENT:
                self._content(text, out)
            else:
                out.append((kind, text))
        if final:
            self._end(out)
        return out

    @abc.abstractmethod
    def _content(self, text: str, out: Pairs) -> None:
        """A content increment: what is decided goes to `out`, the rest is held."""

    @abc.abstractmethod
    def _end(self, out: Pairs) -> None:
        """The end of the text: whatever is held goes to `out`."""


class HermesTools(ContentScanner):
    """Content scanned for <tool_call> blocks; `parse` turns a block's body into a call payload (None:
    not a call, kept as written). Hermes bodies are JSON (their arguments stream, see the module doc);
    Qwen3-Coder's are XML (coder_parser), returned whole."""

    def __init__(self, inner: Splitter | None = None, parse: Callable[[str], str | None] | None = None):
        self.inner, self.streams = inner, parse is None
        self.parse = parse or (lambda body: json_call(body.strip()))
        self._buf, self._in_call = "", False
        self._called = False  # after a call, whitespace between blocks is not content
        self._call: ArgsStream | None = None  # the open block's call, once its head is read

    def _content(self, text: str, out: Pairs) -> None:
        self._buf += text
        while (at := self._buf.find(tag := CALL_CLOSE if self._in_call else CALL_OPEN)) >= 0:
            head, self._buf = self._buf[:at], self._buf[at + len(tag):]
            if self._in_call:
                self._close(head, out)
            else:
                self._text(head, out)
            self._in_call = not self._in_call
        if self._in_call:
            self._stream(self._buf[: len(self._buf) - held_prefix(self._buf, CALL_CLOSE)], out)
        else:
            keep = held_prefix(self._buf, CALL_OPEN)
            self._text(self._buf[: len(self._buf) - keep], out)
            self._buf = self._buf[len(self._buf) - keep:]

    def _end(self, out: Pairs) -> None:
        if self._in_call and self._call is not None:  # cut while its arguments streamed
            self._close(self._buf[: len(self._buf) - held_prefix(self._buf, CALL_CLOSE)], out)
        elif self._in_call and self.parse(self._buf):
            self._close(self._buf, out)  # a whole call, its close tag not written
        elif self._buf:  # a cut block or a held partial tag: text, as written
            out.append((CONTENT, (CALL_OPEN if self._in_call else "") + self._buf))
        self._buf, self._in_call = "", False

    def _stream(self, body: str, out: Pairs) -> None:
        """The part of an open block's `body` (so far, no partial close tag) not returned yet."""
        if self.streams and self._call is None:
            self._call = ArgsStream.start(body, 0, out)
        if self._call is not None:
            self._call.more(body, out)

    def _close(self, body: str, out: Pairs) -> None:
        """A block ended: a streamed call ends with its last pieces, another is parsed whole."""
        self._stream(body, out)  # (a head written in one piece with its close tag begins here)
        if self._call is not None:
            self._call.close(body, out)
            self._call, self._called = None, True
            return
        call = self.parse(body)
        out.append((TOOL_CALL, call) if call else (CONTENT, CALL_OPEN + body + CALL_CLOSE))
        self._called = self._called or call is not None

    def _text(self, text: str, out: Pairs) -> None:
        if text and not (self._called and not text.strip()):
            out.append((CONTENT, text))


def _typed(value: str, schema: dict) -> object:
    """A Qwen3-Coder parameter's text as its schema's type (strings stay text; what does not convert
    stays text; no schema: JSON if it parses as a JSON object or array, else text)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if kind == "string" or (kind is None and not value.lstrip().startswith(("{", "["))):
        return value
    if kind == "boolean" and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    try:
        got = json.loads(value)
    except json.JSONDecodeError:
        return value
    ok = {"integer": int, "number": (int, float), "object": dict, "array": list}.get(kind, object)
    return got if isinstance(got, ok) and not isinstance(got, bool) else value


def coder_parser(tools: list[dict] | None) -> Callable[[str], str | None]:
    """A <tool_call> body in Qwen3-Coder's XML -> the call payload, parameters typed by `tools`' schemas
    (OpenAI function tools)."""
    props = {}
    for t in tools or []:
        fn = t.get("function") or {}
        params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
        props[fn.get("name")] = params.get("properties") if isinstance(params.get("properties"), dict) else {}

    def parse(body: str) -> str | None:
        m = _FUNCTION.fullmatch(body.strip())
        if m is None:
            return None
        name, schema = m.group(1).strip(), props.get(m.group(1).strip(), {})
        args = {}
        for p in _PARAMETER.finditer(m.group(2)):
            value = p.group(2).removeprefix("\n").removesuffix("\n")  # the template's own line breaks
            args[p.group(1).strip()] = _typed(value, schema.get(p.group(1).strip(), {}))
        return call_payload(name, args)

    return parse
