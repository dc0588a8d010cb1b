"""Size bounds for chat-template rendering that must hold *before* CPython allocates.

A single C-level call (`'%0999999999d' % 1`, `'a'|center(10**9)`, `str(list_of_big_strings)`) holds the
GIL while it builds its result, so neither the render's wall-clock tracer nor its output-size check can
stop it in time: the whole server would stall for a minute and gigabytes. These checks estimate the size
of what an operation is about to build and raise SecurityError instead.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from jinja2.exceptions import SecurityError

MAX_CHARS = 1 << 20  # same bound as chat.MAX_OUTPUT_CHARS
_MAX_NODES = 1 << 20
# width / precision of %-formatting and of str.format specs: the digits that can blow up a result
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\d*)(?:\.(\d*))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*:([^{}]*)\}")
# filters whose int arguments are widths or counts of what they build
_SIZED_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate", "batch", "slice"})


def size_of(value: Any, limit: int = MAX_CHARS) -> int:
    """Rough number of characters str(value) has (strings, numbers, nested containers); stops counting
    once past `limit` (returns a number > limit)."""
    total, nodes, stack = 0, 0, [value]
    while stack and total <= limit:
        v = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            return limit + 1
        if isinstance(v, str):
            total += str.__len__(v) + 2  # not len(): a chat_spans.Marked would count it as the template's
        elif isinstance(v, bytes):
            total += len(v) + 2
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
            total += 2 * len(v)
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
            total += 2 + 2 * len(v)
        elif isinstance(v, range):
            total += 8 * len(v)
        else:
            total += 24
    return total


def check(n: int, what: str = "a string or list") -> None:
    if n > MAX_CHARS:
        raise SecurityError(f"{what} would grow larger than 1 MiB")


def _check_spec_digits(fmt: str, pattern: re.Pattern) -> None:
    for m in pattern.finditer(fmt):
        for digits in re.findall(r"\d+", "".join(g or "" for g in m.groups())):
            if len(digits) > 7 or int(digits) > MAX_CHARS:
                raise SecurityError("a format width or precision is too large")


def check_percent(fmt: Any, args: Any) -> None:
    """`fmt % args` (the `%` operator and the `format` filter)."""
    if isinstance(fmt, str):
        _check_spec_digits(fmt, _PERCENT_SPEC)
        check(len(fmt) + size_of(args))


def check_brace(fmt: str, args: tuple, kwargs: dict) -> None:
    """`fmt.format(*args, **kwargs)` / `format_map`."""
    _check_spec_digits(fmt, _BRACE_SPEC)
    check(len(fmt) + size_of(args) + size_of(kwargs))


def _int_args_bounded(args: tuple, kwargs: dict) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
            raise SecurityError("a width or count argument is too large")


def _filter_precheck(name: str, args: tuple, kwargs: dict) -> None:
    """args[0] is the filtered value (after any context argument Jinja passes)."""
    if name in _SIZED_FILTERS:
        _int_args_bounded(args[1:], kwargs)
    value = args[0] if args else None
    if name == "format":
        check_percent(value, args[1:] or kwargs)
    elif name == "join":
        sep = args[1] if len(args) > 1 else kwargs.get("d", "")
        items = list(value) if isinstance(value, (list, tuple, range)) else []
        check(size_of(items) + len(str(sep)) * len(items))
    elif name == "tojson":
        indent = kwargs.get("indent", args[2] if len(args) > 2 else None)
        if isinstance(indent, int) and indent > 64:
            raise SecurityError("tojson indent is too large")
    elif name == "indent" and isinstance(value, str):
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        check(len(value) + (value.count("\n") + 1) * (len(width) if isinstance(width, str) else width))
    elif name == "wordwrap" and isinstance(value, str):
        wrap = kwargs.get("wrapstring") or (args[4] if len(args) > 4 else None) or "\n"
        width = args[1] if len(args) > 1 else kwargs.get("width", 79)
        check(len(value) + len(value) // max(int(width), 1) * len(str(wrap)))


def bounded_filters(filters: dict) -> dict:
    """The environment's filters, each prechecked (the filtered value is its first non-context arg)."""
    def wrap(name: str, f):
        skip = 1 if getattr(f, "jinja_pass_arg", None) is not None else 0

        @functools.wraps(f)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            _filter_precheck(name, args[skip:], kwargs)
            return f(*args, **kwargs)
        return bounded

    return {name: wrap(name, f) for name, f in filters.items()}


def finalize(value: Any) -> Any:
    """Every `{{ expression }}` value before Jinja turns it into text."""
    if not isinstance(value, str):
        check(size_of(value), "an output value")
    return value
