"""gpt-oss's Harmony output format -> reasoning, content and tool calls, whole or streamed.

After the prompt's `<|start|>assistant` the model writes one or more messages:

    <|channel|>analysis<|message|>chain of thought<|end|>
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>
        {"city":"Oslo"}<|call|>                                            (one line, without the break)

(the recipient may also come first: `<|start|>assistant to=functions.f<|channel|>commentary json<|message|>`).
Channel `analysis` is reasoning (`reasoning_content` in the OpenAI chat API), `final` is the answer
(`content`), `commentary` addressed `to=functions.NAME` is a tool call whose body is its arguments;
commentary without a recipient (a preamble shown to the user) counts as content.

The parser takes text decoded with the markers in it. llama.cpp (and orcd's vocab, the same way) makes
<|channel|>, <|message|>, <|start|>, <|constrain|> user-defined tokens, so they survive decoding with
special tokens skipped; <|end|>, <|return|>, <|call|> may be missing then, which the parser allows
(a new <|start|> or <|channel|> also closes a message). Text with no Harmony markup at all is content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MARKERS = ("start", "channel", "message", "constrain", "end", "return", "call")
_MARK = re.compile(r"<\|(" + "|".join(_MARKERS) + r")\|>")
_MARK_TEXTS = tuple(f"<|{m}|>" for m in _MARKERS)
_CLOSERS = ("end", "return", "call")
REASONING, CONTENT, TOOL_CALL = "reasoning_content", "content", "tool_call"


@dataclass
class ToolCall:
    name: str  # the function's name, without the "functions." namespace
    arguments: str  # the message body as written (JSON when content_type is json)
    content_type: str | None = None


@dataclass
class HarmonyMessage:
    channel: str | None
    recipient: str | None
    content_type: str | None
    content: str

    @property
    def kind(self) -> str:
        """REASONING, CONTENT or TOOL_CALL: where this message goes in a chat completion."""
        if self.channel == "analysis":
            return REASONING
        if self.recipient and self.recipient.startswith("functions."):
            return TOOL_CALL
        return CONTENT


@dataclass
class HarmonyResult:
    reasoning_content: str | None  # None when the model wrote no analysis message
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


def _header(raw: str) -> tuple[str | None, str | None, str | None]:
    """'assistant<|channel|>commentary to=functions.f <|constrain|>json' -> (channel, recipient, type)."""
    channel = re.search(r"<\|channel\|>\s*([^\s<]+)", raw)
    recipient = re.search(r"(?:^|\s)to=([^\s<]+)", raw)
    ctype = re.search(r"<\|constrain\|>\s*([^\s<]+)", raw) or re.search(
        r"<\|channel\|>\s*[^\s<]+\s+(?!to=)([^\s<]+)", raw)
    return (channel and channel.group(1), recipient and recipient.group(1), ctype and ctype.group(1))


def _partial_marker(text: str) -> int:
    """Where a marker may be starting at the end of `text` (held back while streaming), else len(text)."""
    i = text.rfind("<", max(0, len(text) - 12))
    if i >= 0 and any(m.startswith(text[i:]) for m in _MARK_TEXTS):
        return i
    return len(text)


class HarmonyParser:
    """Incremental: push(text delta) -> [(kind, text delta)] with kind REASONING / CONTENT / TOOL_CALL
    (tool-call deltas are argument text; `current` is the open message, its recipient the function);
    flush() at the end."""

    def __init__(self) -> None:
        self.messages: list[HarmonyMessage] = []  # closed messages (and the open one, on flush)
        self._buf = ""  # unparsed tail (a possible partial marker)
        self._header = ""  # header text of the message being started
        self._open: HarmonyMessage | None = None  # the message whose body is being read
        self._saw_markup = False

    @property
    def current(self) -> HarmonyMessage | None:
        """The message whose body is being read (after its <|message|>), else None."""
        return self._open

    def push(self, text: str) -> list[tuple[str, str]]:
        self._buf += text
        out: list[tuple[str, str]] = []
        while (m := _MARK.search(self._buf)) is not None:
            self._text(self._buf[: m.start()], out)
            self._marker(m.group(1))
            self._buf = self._buf[m.end() :]
        cut = _partial_marker(self._buf)
        self._text(self._buf[:cut], out)
        self._buf = self._buf[cut:]
        return out

    def flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._text(self._buf, out)
        self._buf = ""
        if self._open is not None:
            self.messages.append(self._open)
            self._open = None
        elif self._header and not self._saw_markup:  # no Harmony markup at all: plain content
            self.messages.append(HarmonyMessage(None, None, None, self._header))
            out.append((CONTENT, self._header))
        self._header = ""
        return out

    def _text(self, text: str, out: list[tuple[str, str]]) -> None:
        if not text:
            return
        if self._open is None:
            self._header += text
        else:
            self._open.content += text
            out.append((self._open.kind, text))

    def _marker(self, name: str) -> None:
        self._saw_markup = True
        if self._open is not None:
            if name not in _CLOSERS and name not in ("start", "channel"):
                self._open.content += f"<|{name}|>"  # stray markup inside a body: keep it as text
                return
            self.messages.append(self._open)
            self._open, self._header = None, ""
            if name == "channel":  # a new header without <|end|><|start|> (markers skipped)
                self._header = "<|channel|>"
            return
        if name == "message":
            self._open = HarmonyMessage(*_header(self._header), content="")
            self._header = ""
        elif name == "start":
            self._header = ""
        elif name not in _CLOSERS:
            self._header += f"<|{name}|>"


def parse_harmony(text: str) -> HarmonyResult:
    """A whole completion -> (reasoning_content, content, tool_calls); each field joins its messages."""
    p = HarmonyParser()
    p.push(text)
    p.flush()
    reasoning = [m.content for m in p.messages if m.kind == REASONING]
    calls = [ToolCall(m.recipient.removeprefix("functions."), m.content, m.content_type)
             for m in p.messages if m.kind == TOOL_CALL and m.recipient]
    content = "".join(m.content for m in p.messages if m.kind == CONTENT)
    return HarmonyResult("".join(reasoning) if reasoning else None, content, calls)
