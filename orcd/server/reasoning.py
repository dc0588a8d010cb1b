"""Reasoning models' output split into `reasoning_content` and `content` (OpenAI chat API), whole or
streamed in arbitrary text deltas.

Two families, chosen per model by `splitter_for(engine, prompt_ids)`:
- gpt-oss (`general.architecture == "gpt-oss"`, or a Harmony chat template): the Harmony channels, by
  orcd.tokenizer.harmony's parser (`analysis` is reasoning, `final` and preambles are content; a tool
  call's arguments, with no tools to return them in, are content too).
- `<think>…</think>` models (DeepSeek-R1 distills, Qwen3, QwQ: a chat template holding `<think>`): the
  text between the tags is reasoning. A prompt that already ends inside `<think>` (templates that open
  the block for the model) starts in reasoning; the tags themselves are never returned, nor the blank
  lines right after them.
Other models get no splitter: their text is all content and their responses carry no reasoning field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

from orcd.errors import RequestError
from orcd.tokenizer.harmony import REASONING, TOOL_CALL, HarmonyParser

CONTENT = "content"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class Splitter(Protocol):
    def push(self, text: str) -> list[tuple[str, str]]: ...

    def flush(self) -> list[tuple[str, str]]: ...


def held_prefix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (held back: the tag may be
    completing in the next delta)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


class ThinkSplitter:
    """push(delta) -> [(REASONING | CONTENT, text)]; flush() at the end. Robust to a tag split across
    deltas (a possible partial tag is held back until it completes or cannot)."""

    def __init__(self, in_reasoning: bool = False):
        self.kind = REASONING if in_reasoning else CONTENT
        self._buf = ""
        self._lstrip = in_reasoning  # drop the blank lines a block starts with
        self._seen_close = False

    def push(self, text: str) -> list[tuple[str, str]]:
        self._buf += text
        out: list[tuple[str, str]] = []
        while True:
            tag = THINK_CLOSE if self.kind == REASONING else THINK_OPEN
            at = self._buf.find(tag)
            if at < 0:
                break
            self._emit(self._buf[:at], out)
            self._buf = self._buf[at + len(tag):]
            if self.kind == CONTENT and self._seen_close:  # a second block after the answer: keep as text
                self._emit(tag, out)
                continue
            self._seen_close = self._seen_close or tag == THINK_CLOSE
            self.kind = CONTENT if self.kind == REASONING else REASONING
            self._lstrip = True
        keep = held_prefix(self._buf, THINK_CLOSE if self.kind == REASONING else THINK_OPEN)
        self._emit(self._buf[: len(self._buf) - keep], out)
        self._buf = self._buf[len(self._buf) - keep:]
        return out

    def flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._emit(self._buf, out)
        self._buf = ""
        return out

    def _emit(self, text: str, out: list[tuple[str, str]]) -> None:
        if self._lstrip:
            text = text.lstrip("\n")
            if not text:
                return
            self._lstrip = False
        if text:
            out.append((self.kind, text))


class HarmonySplitter:
    """HarmonyParser's kinds mapped to the chat API's fields (tool-call text is content while orcd returns
    no tool calls: nothing the model wrote is dropped)."""

    def __init__(self) -> None:
        self._p = HarmonyParser()

    @staticmethod
    def _map(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(CONTENT if kind == TOOL_CALL else kind, text) for kind, text in pairs]

    def push(self, text: str) -> list[tuple[str, str]]:
        return self._map(self._p.push(text))

    def flush(self) -> list[tuple[str, str]]:
        return self._map(self._p.flush())


def joined(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """[(kind, text)] -> {"reasoning_content": ..., "content": ...}, only the kinds present."""
    out: dict[str, str] = {}
    for kind, text in pairs:
        out[kind] = out.get(kind, "") + text
    return out


def split_all(splitter: Splitter, text: str) -> tuple[str | None, str]:
    """A whole completion -> (reasoning_content or None when there was none, content)."""
    parts = joined(splitter.push(text) + splitter.flush())
    return parts.get(REASONING), parts.get(CONTENT, "")


def is_harmony(architecture: str | None, template: str | None) -> bool:
    return architecture == "gpt-oss" or bool(template and "<|channel|>" in template)


def splitter_for(engine, prompt_ids: list[int]) -> Callable[[], Splitter] | None:
    """A factory of splitters (one per choice) for this model and prompt, or None for a model that does
    not reason in a way orcd recognises."""
    tok = engine.tokenizer
    template = getattr(getattr(tok, "vocab", None), "chat_template", None)
    if is_harmony(getattr(engine, "architecture", None), template):
        return HarmonySplitter
    if not template or THINK_OPEN not in template:
        return None
    tail = tok.decode(prompt_ids[-8:], skip_special=False, strip_leading_space=False)
    opened = tail.rfind(THINK_OPEN) > tail.rfind(THINK_CLOSE)  # the template opened the block
    return lambda: ThinkSplitter(in_reasoning=opened)


_RESERVED = frozenset({"messages", "add_generation_prompt", "tools", "documents", "bos_token", "eos_token",
                       "raise_exception", "strftime_now", "tool_choice"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def template_kwargs(kwargs: dict[str, Any] | None, effort: str | None = None) -> dict[str, Any]:
    """`chat_template_kwargs` (vLLM's and llama.cpp's extension: `{"enable_thinking": false}` for Qwen3,
    QwQ): extra variables for the chat template. What the server itself sets is refused, naming the key.
    effort: the chat route's `reasoning_effort` (effort_kwargs); given in both places, the values agree."""
    for key in kwargs or {}:
        if not _NAME.match(key) or key in _RESERVED:
            raise RequestError(f"chat_template_kwargs.{key}: not a variable a request may set",
                               param=f"chat_template_kwargs.{key}")
    out = dict(kwargs or {})
    for key, value in effort_kwargs(effort, "reasoning_effort").items():
        if out.setdefault(key, value) != value:
            raise RequestError("reasoning_effort: disagrees with chat_template_kwargs.reasoning_effort",
                               param="reasoning_effort")
    return out


def turn_reasoning(text: str) -> dict[str, str]:
    """An earlier assistant turn's reasoning, sent back by the client, as template message fields: the
    names templates read it by (Qwen3's `reasoning_content`, transformers' gpt-oss `thinking`)."""
    return {"reasoning_content": text, "thinking": text}


EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # OpenAI's reasoning effort values


def effort_kwargs(effort: Any, param: str, allowed: tuple[str, ...] = EFFORTS) -> dict[str, str]:
    """A reasoning effort (chat `reasoning_effort`, Responses `reasoning.effort`, Anthropic
    `output_config.effort`) as the chat template's `reasoning_effort` variable, as transformers passes it:
    gpt-oss's Harmony template writes it into the system message (`Reasoning: high`); templates that do
    not read it ignore it. None: unset. Anything but one of `allowed` is refused, naming `param`."""
    if effort is None:
        return {}
    if not isinstance(effort, str) or effort not in allowed:
        raise RequestError(f"{param}: {effort!r} is not one of {', '.join(allowed)}", param=param)
    return {"reasoning_effort": effort}
