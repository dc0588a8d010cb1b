"""Where each message's content lands in a rendered chat template, from one render.

Contents go into the template wrapped in private-use sentinels (Content); the rendered text with the
sentinels stripped is the plain rendering, and the sentinels' places are the content spans, provided the
template only printed, compared, measured or trimmed the contents. Anything else it does with a content
(an attribute or method beyond strip/lstrip/rstrip/startswith/endswith, indexing, iterating, ordering,
`%`, repr, a format spec, a filter other than trim/length/count/string/default/escape/safe, a content
passed to a call) marks the render's Probe "touched": the caller then renders the plain messages too and
compares (ChatTemplate.render_spans), which is what it always did before; whatever was touched acted on
the marked string exactly as it did then. One known gap: `content in some_string` runs inside the string
(no hook), so a template that branches on it sees the sentinels.
"""

from __future__ import annotations

import functools
from typing import Any

OPEN, CLOSE = "\U000f0000", "\U000f0001"  # private-use sentinels around message contents
MESSAGE_TEXTS = ("content", "reasoning_content", "thinking")  # a message's fields that are plain text
# the attributes a template may use without touching the content's text (isinstance reads __class__)
_PLAIN_ATTRS = frozenset({"__class__", "inner", "probe", "strip", "lstrip", "rstrip", "startswith",
                          "endswith"})
# filters that keep a content whole, trim it (Content.strip) or only measure it
SAFE_FILTERS = frozenset({"trim", "length", "count", "string", "default", "d"})


class Probe:
    """One render's record: did the template do more with a content than print it?"""

    __slots__ = ("touched",)

    def __init__(self) -> None:
        self.touched = False


def _touch(content: Content) -> None:
    object.__getattribute__(content, "probe").touched = True


def _touching(name: str) -> Any:
    """str's own dunder on the marked string (as without the probe), marking the probe first."""
    act = getattr(str, name)

    def method(self: Any, *args: Any) -> Any:
        _touch(self)
        return act(self, *args)
    method.__name__ = name
    return method


class Marked(str):
    """A string made from a content (`'<|user|>' + content`, `x ~ content`): printing it and joining it
    to more text keep it Marked; anything else done with it (compare, test, measure, an attribute, a
    method, indexing) marks the probe, since the sentinels inside would change the answer."""

    probe: Probe

    def __new__(cls, text: str, probe: Probe) -> Marked:
        obj = super().__new__(cls, text)
        obj.probe = probe
        return obj

    def __getattribute__(self, name: str) -> Any:
        if name not in ("__class__", "probe"):  # isinstance reads __class__
            _touch(self)
        return object.__getattribute__(self, name)

    def __add__(self, other: Any) -> Any:
        out = str.__add__(self, other)
        return Marked(out, object.__getattribute__(self, "probe")) if isinstance(out, str) else out

    def __radd__(self, other: Any) -> Any:
        out = str.__add__(other, self) if isinstance(other, str) else NotImplemented
        return Marked(out, object.__getattribute__(self, "probe")) if isinstance(out, str) else out

    def __format__(self, spec: str) -> str:
        if spec:
            _touch(self)
        return str.__format__(self, spec)

    __eq__ = _touching("__eq__")
    __ne__ = _touching("__ne__")
    __hash__ = _touching("__hash__")
    __len__ = _touching("__len__")
    __contains__ = _touching("__contains__")
    __getitem__ = _touching("__getitem__")
    __iter__ = _touching("__iter__")
    __lt__ = _touching("__lt__")
    __le__ = _touching("__le__")
    __gt__ = _touching("__gt__")
    __ge__ = _touching("__ge__")
    __mod__ = _touching("__mod__")
    __mul__ = _touching("__mul__")
    __rmul__ = _touching("__rmul__")
    __repr__ = _touching("__repr__")

    def __bool__(self) -> bool:
        _touch(self)
        return str.__len__(self) > 0


class Content(Marked):
    """A message content wrapped in sentinels; tests, measures and trims act on the content itself, so
    templates branch the same as with the plain string."""

    inner: str

    def __new__(cls, inner: str, probe: Probe) -> Content:
        obj = super().__new__(cls, OPEN + inner + CLOSE, probe)
        obj.inner = inner
        return obj

    def __getattribute__(self, name: str) -> Any:
        if name not in _PLAIN_ATTRS:
            _touch(self)
        return object.__getattribute__(self, name)

    def __eq__(self, other: object) -> bool:
        return self.inner == (other.inner if isinstance(other, Content) else other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.inner)

    def __bool__(self) -> bool:
        return bool(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def strip(self, chars: str | None = None) -> Content:
        return Content(self.inner.strip(chars), self.probe)

    def lstrip(self, chars: str | None = None) -> Content:
        return Content(self.inner.lstrip(chars), self.probe)

    def rstrip(self, chars: str | None = None) -> Content:
        return Content(self.inner.rstrip(chars), self.probe)

    def startswith(self, *args: Any) -> bool:
        return self.inner.startswith(*args)

    def endswith(self, *args: Any) -> bool:
        return self.inner.endswith(*args)

    def __contains__(self, part: object) -> bool:  # `'</think>' in content`
        return part in self.inner


def joined(parts: list, text: str) -> str:
    """`text` (parts joined) Marked when a part was: `~` keeps what `+` keeps."""
    marked = next((p for p in parts if isinstance(p, Marked)), None)
    return text if marked is None else Marked(text, object.__getattribute__(marked, "probe"))


def touch_any(values: Any, budget: int = 10_000) -> None:
    """Mark the probe of every Content or Marked among `values` (nested lists, tuples, dict values),
    looking at no more than `budget` items (generators are not walked)."""
    stack = [values]
    while stack and budget > 0:
        v = stack.pop()
        budget -= 1
        if isinstance(v, Marked):
            _touch(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def probing_filters(filters: dict) -> dict:
    """The environment's filters; those not in SAFE_FILTERS mark the probe of any content they get (the
    safe ones act on a Content's own text; on a Marked they touch it themselves)."""
    def wrap(f: Any) -> Any:
        @functools.wraps(f)  # keeps jinja_pass_arg
        def probing(*args: Any, **kwargs: Any) -> Any:
            touch_any((args, kwargs))
            return f(*args, **kwargs)
        return probing

    return {name: f if name in SAFE_FILTERS else wrap(f) for name, f in filters.items()}


def wrap_message(msg: Any, probe: Probe) -> Any:
    if not isinstance(msg, dict):
        return msg
    out = dict(msg)
    for key in MESSAGE_TEXTS:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = Content(value, probe)
        elif isinstance(value, list):
            out[key] = [{**p, "text": Content(p["text"], probe)} if isinstance(p, dict) and isinstance(
                p.get("text"), str) else p for p in value]
    return out


def spans(marked: str) -> tuple[str, list[tuple[int, int]]] | None:
    """Strip sentinels; (text, content spans), or None if they are not properly paired.
    Scans with str.find (C speed): the sentinels alternate OPEN, CLOSE, OPEN ... or the marks are bad."""
    parts, found, n, pos = [], [], 0, 0
    while True:
        i = marked.find(OPEN, pos)
        j = marked.find(CLOSE, pos)
        if i < 0:
            if j >= 0:
                return None  # a CLOSE with no OPEN
            break
        if 0 <= j < i:
            return None
        k = marked.find(CLOSE, i + 1)
        if k < 0 or OPEN in marked[i + 1:k]:
            return None
        parts += [marked[pos:i], marked[i + 1:k]]
        start = n + (i - pos)
        n = start + (k - i - 1)
        if n > start:
            found.append((start, n))
        pos = k + 1
    parts.append(marked[pos:])
    return "".join(parts), found


def all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in all_strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in all_strings(v)]
    return []
