"""Text that JSON allows but UTF-8 cannot carry: lone UTF-16 surrogates (`"\\ud83d"`).

JavaScript clients produce them when they cut a string inside an emoji. Python's json module decodes
them into str values that later fail to encode (tokenizer, logs, responses); the request is refused
with a 400 naming the field instead, before any work is done.
"""

from __future__ import annotations

import re
from typing import Any

from orcd.errors import RequestError

_SURROGATE = re.compile("[\ud800-\udfff]")
_TEXTUAL = frozenset({str, dict, list})


def printable(text: str) -> str:
    """`text` with any surrogate written as a backslash escape, so it can be UTF-8 encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _where(path: list[str | int]) -> str:
    return printable(".".join(str(p) for p in path)) or "body"


def _bad(text: str, path: list[str | int], what: str = "string") -> RequestError:
    where = _where(path)
    return RequestError(f"{where}: the {what} holds a lone UTF-16 surrogate (invalid Unicode; was a "
                        f"character cut in half?)", param=where)


def check_no_surrogates(data: Any) -> None:
    """Raise RequestError (param = the dotted path, e.g. `messages.0.content`) at the first string or
    object key in `data` that holds a lone surrogate. Iterative: nesting depth costs no stack."""
    if isinstance(data, str):
        if _SURROGATE.search(data):
            raise _bad(data, [])
        return
    if not isinstance(data, (dict, list)):
        return
    todo: list[tuple[list[str | int], Any]] = [([], data)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, list) and not _TEXTUAL.intersection(map(type, value)):
            continue  # numbers only (token ids): nothing to look at, skipped at C speed
        items = value.items() if isinstance(value, dict) else enumerate(value)
        nested = []
        for key, item in items:
            if isinstance(key, str) and _SURROGATE.search(key):
                raise _bad(key, [*path, key], "key")
            if isinstance(item, str):
                if _SURROGATE.search(item):
                    raise _bad(item, [*path, key])
            elif isinstance(item, (dict, list)):
                nested.append(([*path, key], item))
        todo.extend(reversed(nested))
