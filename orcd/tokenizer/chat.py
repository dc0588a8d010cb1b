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
import jinja2.nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orcd.errors import TemplateError
from orcd.tokenizer import chat_bounds
from orcd.tokenizer.chat_spans import (
    CLOSE,
    OPEN,
    Probe,
    all_strings,
    joined,
    probing_filters,
    spans,
    touch_any,
    wrap_message,
)

DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MAX_RENDER_SECONDS = 2.0
MAX_OUTPUT_CHARS = 1 << 20  # 1 MiB of text
MAX_TEMPLATE_CHARS = 1 << 20


_HIDDEN_JOINS = (jinja2.nodes.Macro, jinja2.nodes.CallBlock, jinja2.nodes.FilterBlock,
                 jinja2.nodes.AssignBlock)


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


def _raw_len(x: Any) -> int:
    """len() that does not count as the template measuring a content (orcd.tokenizer.chat_spans)."""
    return str.__len__(x) if isinstance(x, str) else len(x)


def _bounded_join(seq: Any) -> str:
    """Jinja's `~` / string-concatenation helper, with the size bound."""
    _check_size(chat_bounds.size_of(list(seq)))
    parts = [str(x) for x in seq]
    _check_size(sum(map(len, parts)))
    return joined(seq, "".join(parts))


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
            touch_any((left, right))  # `'%5s' % content` pads by the marked length: render_spans checks
        if operator == "*":
            _check_size(_repeat_size(left, right))
        if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            _check_size(_raw_len(left) + _raw_len(right))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _precheck_call(__obj, args)
        touch_any((args, kwargs))  # a content passed to a call (`x.split(content)`): render_spans checks
        return super().call(__context, __obj, *args, **kwargs)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str):
        source = DEFAULT_TEMPLATE if source is None else source
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateError("chat template is larger than 1 MiB")
        env = _Env(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag],
                   finalize=chat_bounds.finalize)
        env.filters["tojson"] = _tojson
        env.filters["replace"] = _bounded_replace
        env.filters = probing_filters(chat_bounds.bounded_filters(env.filters))
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            self._template = env.from_string(source)
            # text made by a macro, a block `set` or a `filter` block is joined out of sight of the
            # probe (orcd.tokenizer.chat_spans): such templates always get the plain render too
            self._one_render = not any(env.parse(source).find_all(_HIDDEN_JOINS))
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
        their place in the text cannot be told (the text is still the exact rendering).
        One render (contents marked) when the template only printed, compared or trimmed the contents
        (orcd.tokenizer.chat_spans); otherwise the plain render too, and the marked one must match it."""
        if any(OPEN in t or CLOSE in t for t in all_strings(messages)):
            return self.render(messages, add_generation_prompt, **extra), None
        probe = Probe()
        try:
            marked = self.render([wrap_message(m, probe) for m in messages], add_generation_prompt, **extra)
            found = spans(marked)
        except TemplateError:  # the plain render below raises its own error, or renders
            found = None
        if found is not None and not probe.touched and self._one_render:
            return found
        text = self.render(messages, add_generation_prompt, **extra)
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
