"""Chat templates: the file's `tokenizer.chat_template` rendered by Jinja2 in a sandbox.

Templates come from untrusted files, so rendering runs in jinja2's ImmutableSandboxedEnvironment with:
attribute access to Python internals (`__class__`, `__subclasses__`, ...) raising TemplateError;
a wall-clock bound (`MAX_RENDER_SECONDS`) and an output bound (`MAX_OUTPUT_CHARS`); `*` / `**` on
strings, lists and numbers bounded so one expression cannot allocate gigabytes.
Globals HF templates use: `raise_exception`, `strftime_now`, `bos_token`, `eos_token`, and a `tojson`
filter that writes JSON like transformers does (non-ASCII kept). Blocks are trimmed like transformers
(`trim_blocks`, `lstrip_blocks`), `loopcontrols` is on, and transformers' `{% generation %}` tag (it
marks assistant text for training masks) renders its body.

Files without a template use DEFAULT_TEMPLATE, ChatML:
    <|im_start|>{role}\\n{content}<|im_end|>\\n ... and, with add_generation_prompt, <|im_start|>assistant\\n

`render_spans` also reports where each message's content landed in the rendered text, so the tokenizer
can parse special tokens in template markup but never inside user content (special-token injection).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orcd.errors import TemplateError
from orcd.tokenizer import chat_bounds

DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MAX_RENDER_SECONDS = 2.0
MAX_OUTPUT_CHARS = 1 << 20  # 1 MiB of text
MAX_TEMPLATE_CHARS = 1 << 20
_OPEN, _CLOSE = "\U000f0000", "\U000f0001"  # private-use sentinels around message contents


class _RenderLimit(Exception):
    pass


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: the body, in its own scope (as transformers renders it)."""
    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _repeat_size(left: Any, right: Any) -> int:
    """Length of `left * right` when it repeats a sequence, else 0."""
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
            return chat_bounds.size_of(seq) * n  # elements count too: [big_string] * 1000
    return 0


def _check_size(n: int) -> None:
    if n > MAX_OUTPUT_CHARS:
        raise SecurityError("a string or list grew larger than 1 MiB")


def _bounded_join(seq: Any) -> str:
    """Jinja's `~` / string-concatenation helper, with the size bound."""
    _check_size(chat_bounds.size_of(list(seq)))
    parts = [str(x) for x in seq]
    _check_size(sum(map(len, parts)))
    return "".join(parts)


def _bounded_replace(s: Any, old: str, new: str, count: int | None = None) -> str:
    s = str(s)
    if old and new:
        _check_size(len(s) + s.count(old) * max(0, len(new) - len(old)))
    return s.replace(old, new, -1 if count is None else count)


def _precheck_call(obj: Any, args: tuple) -> None:
    """Bound the str methods that can multiply a string's size before they allocate."""
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if owner is None:  # the sandbox wraps str.format; the bound method is then __wrapped__
        owner = getattr(getattr(obj, "__wrapped__", None), "__self__", None)
    if not isinstance(owner, str):
        return
    if name in ("format", "format_map"):
        chat_bounds.check_brace(owner, args, {})
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        _bounded_replace(owner, args[0], args[1], 0)  # size check only
    elif name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        _check_size(args[0])
    elif name == "expandtabs":
        _check_size(len(owner) * (args[0] if args and isinstance(args[0], int) else 8))
    elif name == "join" and args:
        items = list(args[0]) if isinstance(args[0], (list, tuple)) else []
        _check_size(sum(len(x) for x in items if isinstance(x, str)) + len(owner) * len(items))


class _Env(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to {attribute!r} of a {type(obj).__name__} is not allowed")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
            raise SecurityError("exponent too large")
        if operator == "%":
            chat_bounds.check_percent(left, right)
        if operator == "*":
            _check_size(_repeat_size(left, right))
        if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            _check_size(len(left) + len(right))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _precheck_call(__obj, args)
        return super().call(__context, __obj, *args, **kwargs)


class _Content(str):
    """A message content wrapped in sentinels; tests and trims act on the content itself, so
    templates branch the same as with the plain string."""

    inner: str

    def __new__(cls, inner: str) -> _Content:
        obj = super().__new__(cls, _OPEN + inner + _CLOSE)
        obj.inner = inner
        return obj

    def __eq__(self, other: object) -> bool:
        return self.inner == (other.inner if isinstance(other, _Content) else other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.inner)

    def __bool__(self) -> bool:
        return bool(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def strip(self, chars: str | None = None) -> _Content:
        return _Content(self.inner.strip(chars))

    def lstrip(self, chars: str | None = None) -> _Content:
        return _Content(self.inner.lstrip(chars))

    def rstrip(self, chars: str | None = None) -> _Content:
        return _Content(self.inner.rstrip(chars))

    def startswith(self, *args: Any) -> bool:
        return self.inner.startswith(*args)

    def endswith(self, *args: Any) -> bool:
        return self.inner.endswith(*args)


def _wrap_message(msg: Any) -> Any:
    if not isinstance(msg, dict):
        return msg
    out = dict(msg)
    for key in ("content", "reasoning_content"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = _Content(value)
        elif isinstance(value, list):
            out[key] = [{**p, "text": _Content(p["text"])} if isinstance(p, dict) and isinstance(
                p.get("text"), str) else p for p in value]
    return out


def _spans(marked: str) -> tuple[str, list[tuple[int, int]]] | None:
    """Strip sentinels; (text, content spans), or None if they are not properly paired.
    Scans with str.find (C speed): the sentinels alternate OPEN, CLOSE, OPEN ... or the marks are bad."""
    parts, spans, n, pos = [], [], 0, 0
    while True:
        i = marked.find(_OPEN, pos)
        j = marked.find(_CLOSE, pos)
        if i < 0:
            if j >= 0:
                return None  # a CLOSE with no OPEN
            break
        if 0 <= j < i:
            return None
        k = marked.find(_CLOSE, i + 1)
        if k < 0 or _OPEN in marked[i + 1:k]:
            return None
        parts += [marked[pos:i], marked[i + 1:k]]
        start = n + (i - pos)
        n = start + (k - i - 1)
        if n > start:
            spans.append((start, n))
        pos = k + 1
    parts.append(marked[pos:])
    return "".join(parts), spans


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str):
        source = DEFAULT_TEMPLATE if source is None else source
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateError("chat template is larger than 1 MiB")
        env = _Env(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag],
                   finalize=chat_bounds.finalize)
        env.filters["tojson"] = _tojson
        env.filters["replace"] = _bounded_replace
        env.filters = chat_bounds.bounded_filters(env.filters)
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as err:
            raise TemplateError(f"chat template does not compile: {err}") from None
        # `~` concatenation compiles to the module-level helper str_join: swap in the bounded one
        self._template.root_render_func.__globals__["str_join"] = _bounded_join
        self._vars = {"bos_token": bos_token, "eos_token": eos_token}

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        if not isinstance(messages, list):
            raise TemplateError("messages must be a list")
        variables = {**self._vars, **extra, "messages": messages,
                     "add_generation_prompt": add_generation_prompt}
        return self._bounded_render(variables)

    def render_spans(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                     **extra: Any) -> tuple[str, list[tuple[int, int]] | None]:
        """(rendered text, content spans). Spans is None when the template rewrote the contents so
        their place in the text cannot be told (the text is still the exact rendering)."""
        text = self.render(messages, add_generation_prompt, **extra)
        if any(_OPEN in t or _CLOSE in t for t in _all_strings(messages)):
            return text, None
        marked = self.render([_wrap_message(m) for m in messages], add_generation_prompt, **extra)
        found = _spans(marked)
        if found is None or found[0] != text:
            return text, None
        return text, found[1]

    def _bounded_render(self, variables: dict[str, Any]) -> str:
        deadline = time.monotonic() + MAX_RENDER_SECONDS
        counter = [0]

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            # every call is seen; lines only inside the template's own code (its loops), not inside
            # jinja's runtime or our filters, whose loops are bounded by their inputs' sizes
            counter[0] += 1
            if counter[0] % 256 == 0 and time.monotonic() > deadline:
                raise _RenderLimit(f"took longer than {MAX_RENDER_SECONDS} s")
            return tracer if frame.f_code.co_filename == "<template>" else None

        chunks, size = [], 0
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            for chunk in self._template.generate(**variables):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise _RenderLimit("output is larger than 1 MiB")
                chunks.append(chunk)
        except TemplateError:
            raise
        except _RenderLimit as err:
            raise TemplateError(f"chat template render stopped: {err}") from None
        except SecurityError as err:
            raise TemplateError(f"chat template blocked by the sandbox: {err}") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                OverflowError, RecursionError, ZeroDivisionError) as err:
            raise TemplateError(f"chat template failed: {type(err).__name__}: {err}") from None
        finally:
            sys.settrace(previous)
        return "".join(chunks)


def _all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _all_strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _all_strings(v)]
    return []
