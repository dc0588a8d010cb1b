"""Llama 3.1-3.3 tool calls (orcd.server.tool_scanners' splitter protocol): the answer is one JSON call
object `{"name": .., "parameters": {..}}`, or several joined by `;` (Llama 3.2). Content that starts with
`{` is held; a call whose name comes first streams its arguments as Hermes calls do ((CALL_BEGIN, name),
(CALL_ARGS, piece)..., then its whole TOOL_CALL once its object closes). Held text that is no call is
returned at the end as content, as written; other content streams as it comes."""

from __future__ import annotations

from orcd.server.reasoning import CONTENT, Splitter
from orcd.server.tool_scanners import ArgsStream, ContentScanner, Pairs, json_call, json_end
from orcd.tokenizer.harmony import TOOL_CALL


def json_calls(text: str) -> list[str] | None:
    """Text that is one or more JSON call objects, apart by `;` and/or whitespace -> their payloads; None
    when any of it is not a call (a `;` inside a string is no separator)."""
    calls, rest = [], text.strip()
    while rest:
        end = json_end(rest, 0) if rest[0] == "{" else None
        call = json_call(rest[:end]) if end is not None else None
        if call is None:
            return None
        calls.append(call)
        rest = rest[end:].lstrip()
        rest = rest[1:].lstrip() if rest.startswith(";") else rest
    return calls or None


class LlamaJsonTools(ContentScanner):
    def __init__(self, inner: Splitter | None = None):
        self.inner = inner
        self._held = ""  # content held while it may be calls
        self._plain = False  # decided: plain content from here on
        self._pos = 0  # where in _held the calls not returned yet start
        self._call: ArgsStream | None = None  # the call whose arguments stream
        self._at = 0  # where that call's object starts in _held

    def _content(self, text: str, out: Pairs) -> None:
        if self._plain:
            out.append((CONTENT, text))
            return
        self._held += text
        start = self._held.lstrip()
        if start and not start.startswith("{"):
            out.append((CONTENT, self._held))
            self._held, self._plain = "", True
            return
        while self._stream(out):
            pass

    def _stream(self, out: Pairs) -> bool:
        """Streams the held calls; True when one ended (the next may start)."""
        if self._call is None:
            at = self._next()
            self._call, self._at = ArgsStream.start(self._held, at, out), at
            if self._call is None:
                return False
        self._call.more(self._held, out)
        end = json_end(self._held, self._held.index("{", self._at))
        if end is None:
            return False
        self._call.close(self._held[:end], out)
        self._call, self._pos = None, end
        return True

    def _next(self) -> int:
        """Where the next call starts: past the whitespace and one `;` after the last returned call."""
        rest = self._held[self._pos:].lstrip()
        rest = rest[1:].lstrip() if rest.startswith(";") and self._pos else rest
        return len(self._held) - len(rest)

    def _end(self, out: Pairs) -> None:
        if self._call is not None:  # cut while its arguments streamed
            self._call.close(self._held, out)
        elif self._held and not self._plain:
            rest = self._held[self._next():] if self._pos else self._held  # as written if no call came
            found = json_calls(rest) if rest else []
            out += [(TOOL_CALL, c) for c in found] if found is not None else [(CONTENT, rest)]
        self._held, self._plain, self._pos, self._call = "", True, 0, None
