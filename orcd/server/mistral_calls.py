"""Mistral's tool calls (orcd.server.tool_scanners' splitter protocol): `[TOOL_CALLS][{"name": ..,
"arguments": {..}}, ..]` (Nemo) or `[TOOL_CALLS]NAME[ARGS]{..}` (Small 3.2, Devstral, Ministral 3;
`[CALL_ID]id` may sit before `[ARGS]`): a `NAME[ARGS]{` call streams its arguments as Hermes calls do
((CALL_BEGIN, name), (CALL_ARGS, piece)..., its TOOL_CALL when its object closes; one cut by the end of the
text ends with what was written); Nemo's JSON list is returned whole when it closes."""

from __future__ import annotations

import json
import re

from orcd.server.reasoning import CONTENT, Splitter, held_prefix
from orcd.server.tool_scanners import (
    CALL_BEGIN,
    ArgsStream,
    ContentScanner,
    Pairs,
    call_payload,
    json_call,
    json_end,
)
from orcd.tokenizer.harmony import TOOL_CALL

MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class MistralTools(ContentScanner):
    """Content up to `[TOOL_CALLS]` streams as content; from there on each call is returned as soon as
    its JSON closes. What does not parse from there on is content, as written."""

    def __init__(self, inner: Splitter | None = None):
        self.inner = inner
        self._buf, self._in_calls, self._called = "", False, False
        self._call: ArgsStream | None = None  # a `NAME[ARGS]{` call whose arguments stream

    def _content(self, text: str, out: Pairs) -> None:
        self._buf += text
        if not self._in_calls:
            at = self._buf.find(MISTRAL_CALLS)
            cut = at if at >= 0 else len(self._buf) - held_prefix(self._buf, MISTRAL_CALLS)
            self._text(self._buf[:cut], out)
            self._buf, self._in_calls = self._buf[cut:], at >= 0
        if self._in_calls:
            self._calls(out, final=False)

    def _end(self, out: Pairs) -> None:
        if self._in_calls:
            self._calls(out, final=True)
        self._text(self._buf, out)
        self._buf, self._in_calls = "", False

    def _calls(self, out: Pairs, final: bool) -> None:
        """Takes every complete call off the front of the held text (a `NAME[ARGS]{` one streams its
        arguments as they come); stops at an incomplete one (at the end: returns it as text, a streamed
        one as a call) or at text that is no call (returns the rest as text)."""
        while True:
            rest = self._buf.lstrip()
            while rest.startswith(MISTRAL_CALLS):
                rest = rest[len(MISTRAL_CALLS):].lstrip()
            if not rest:
                return
            if self._call is None:  # once `NAME[ARGS]{` is written it is a call (streamed or not)
                self._call = self._begin(rest, out)
            if self._call is not None:
                if not self._stream(rest, out, final):
                    return
                continue
            got = self._one(rest)
            if got is None and not final:
                return  # may still complete
            if not got:
                self._text(self._buf, out, always=True)
                self._buf, self._in_calls = "", False
                return
            calls, self._buf = got
            out += [(TOOL_CALL, c) for c in calls]
            self._called = True

    @staticmethod
    def _begin(rest: str, out: Pairs) -> ArgsStream | None:
        """A `NAME[ARGS]{` call at the front of `rest` (out gets its CALL_BEGIN), or None."""
        at = rest.find(MISTRAL_ARGS)
        name = rest[:at].split(MISTRAL_ID)[0].strip() if at >= 0 else ""
        args_at = len(rest) - len(rest[at + len(MISTRAL_ARGS):].lstrip())
        if at < 0 or not _NAME.fullmatch(name) or rest[args_at:args_at + 1] != "{":
            return None
        out.append((CALL_BEGIN, name))
        return ArgsStream(name, args_at)

    def _stream(self, rest: str, out: Pairs, final: bool) -> bool:
        """The open call's new argument pieces; True when it ended (its object closed, or the text did)."""
        end = json_end(rest, self._call.args_at)
        if end is None and not final:
            self._call.more(rest, out)
            return False
        self._call.close(rest[:end] if end is not None else rest, out)
        self._buf, self._call, self._called = rest[end:] if end is not None else "", None, True
        return True

    @staticmethod
    def _one(rest: str) -> tuple[list[str], str] | bool | None:
        """The call(s) at the front of `rest` and the text after them; None: not complete yet; False:
        not a call."""
        if rest[0] in "[{":  # Nemo: a JSON list of {"name", "arguments"}
            end = json_end(rest, 0)
            if end is None:
                return None
            try:
                items = json.loads(rest[:end])
            except json.JSONDecodeError:
                return False
            calls = [json_call(json.dumps(c)) for c in (items if isinstance(items, list) else [items])]
            return ([c for c in calls if c], rest[end:]) if calls and all(calls) else False
        at = rest.find(MISTRAL_ARGS)
        if at < 0:  # NAME[CALL_ID]id[ARGS]: plausible while what came is a name (+ a partial tag)
            keep = max(held_prefix(rest, MISTRAL_ARGS), held_prefix(rest, MISTRAL_ID))
            name = rest[: len(rest) - keep].split(MISTRAL_ID)[0].strip()
            return None if len(rest) < 256 and (not name or _NAME.fullmatch(name)) else False
        name = rest[:at].split(MISTRAL_ID)[0].strip()
        args = rest[at + len(MISTRAL_ARGS):].lstrip()
        if not _NAME.fullmatch(name) or args[:1] not in ("", "{", "["):
            return False
        end = json_end(args, 0) if args else None
        if end is None:
            return None
        try:
            return [call_payload(name, json.loads(args[:end]))], args[end:]
        except json.JSONDecodeError:
            return False

    def _text(self, text: str, out: Pairs, always: bool = False) -> None:
        if text and (always or not (self._called and not text.strip())):
            out.append((CONTENT, text))
