"""Lark rules of one forced call in the two formats that are not a JSON object: Qwen3-Coder's XML and
gpt-oss Harmony (orcd.structured.tool_grammar picks the format and joins the rules).

Qwen3-Coder (parsed back by orcd.server.tool_scanners.coder_parser):

    <tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>

Parameters come in the schema's `properties` order, the required ones always, the others optionally; a
value is written the way the parser reads it back for its schema: strings (and untyped values) as raw
text that never contains `</parameter>` or `</tool_call>`, every other type as compact JSON validating
against the parameter's schema.

Harmony (parsed back by orcd.server.tools.HarmonyTools; the prompt ends with `<|start|>assistant`):

    [<|channel|>analysis<|message|>THOUGHT<|end|><|start|>assistant]
    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...arguments}

The analysis message is optional (gpt-oss reasons first) and may not contain `<|`; the arguments end the
grammar, after which only end-of-generation tokens (<|call|> among them) are allowed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orcd.errors import RequestError

_CLOSERS = r"~/(?s:.*(<\/parameter>|<\/tool_call>).*)/"  # a raw value never closes its block early
# the same for long counted values, where llguidance's lexer gives up on the negation above (maxLength
# 256: "too many expressions constructed"): no `</` at all
_NO_CLOSE_TAG = r"/(?s:\n([^<]|<+[^<\/])*<*)/"
_COUNTED_NEGATION = 64  # the longest bound counted together with _CLOSERS (64 measured to work)
_ANNOTATIONS = {"description", "title", "default", "examples", "format", "deprecated", "readOnly",
                "writeOnly", "$comment"}
_KINDS = ("integer", "number", "boolean", "object", "array", "null")


def _lit(text: str) -> str:
    return json.dumps(text)


def _json(schema: Any) -> str:
    return "%json " + json.dumps(schema | {"x-guidance": {"whitespace_flexible": False}})


def _kind(schema: dict) -> str | None:
    """The type the parser reads a value as (orcd.server.tool_scanners._typed: the first non-null one)."""
    kind = schema.get("type")
    return next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind


def _raw_text(schema: dict, at: str, untyped: bool) -> str:
    """A regex token of a string value written as raw text (its leading line break included): its length
    bounds, an anchored pattern; an untyped value may not start with `{` or `[` (the parser would read it
    as JSON). A bound above _COUNTED_NEGATION keeps `</` out of the value altogether."""
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    if high is None and low == 0:
        parts = [r"/(?s:\n.*)/", _CLOSERS]
    else:
        closers = _CLOSERS if max(low, high or 0) <= _COUNTED_NEGATION else _NO_CLOSE_TAG
        parts = [f"/(?s:\\n.{{{low},{'' if high is None else int(high)}}})/", closers]
    pattern = schema.get("pattern")
    if pattern is not None:
        if not (isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$")):
            raise RequestError(f"{at}.pattern: forcing a Qwen3-Coder call needs a pattern anchored "
                               f"with ^...$", param=at)
        parts.append("/\\n(" + pattern[1:-1].replace("/", "\\/") + ")/")
    if untyped:
        parts.append(r"/(?s:\n\s*([^\s{\[].*)?)/")  # positive: a negation here gives up on long bounds
    return " & ".join(parts)


def _coder_value(schema: Any, at: str) -> tuple[str, bool]:
    """(the rule body of one parameter's value, whether it is a regex token) for its schema."""
    schema = schema if isinstance(schema, dict) else {}
    kind = _kind(schema)
    if kind in _KINDS:
        return _json({**schema, "type": kind}), False
    if kind not in (None, "string") or (kind is None and "type" in schema):
        raise RequestError(f"{at}.type: {kind!r} is not a JSON schema type", param=at)
    options = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if options is not None:
        texts = [v for v in options if isinstance(v, str)
                 and (kind == "string" or not v.lstrip().startswith(("{", "[")))
                 and "</parameter>" not in v and "</tool_call>" not in v]
        if not texts:
            raise RequestError(f"{at}.enum: no value can be written as raw text", param=at)
        return " | ".join(_lit(v) for v in texts), False
    extra = set(schema) - _ANNOTATIONS - {"type", "minLength", "maxLength", "pattern"}
    if extra:
        raise RequestError(f"{at}: forcing a Qwen3-Coder call supports typed parameters; {sorted(extra)} "
                           f"without a type are not", param=at)
    return _raw_text(schema, at, untyped=kind is None), True


def coder_rules(rule: str, name: str, parameters: Any, at: str) -> list[str]:
    """Lark rules defining `rule`: one Qwen3-Coder call of function `name` whose `parameters` schema is
    at request path `at` (errors name it)."""
    params = parameters if isinstance(parameters, dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = [r for r in params.get("required", []) if isinstance(r, str)]
    names = list(props) + [r for r in required if r not in props]
    rules, seq = [], []
    for j, p in enumerate(names):
        if not re.fullmatch(r"[^>\n]+", p) or p != p.strip():
            raise RequestError(f"{at}.properties: {p!r} cannot be a Qwen3-Coder parameter name", param=at)
        body, token = _coder_value(props.get(p, {}), f"{at}.properties.{p}")
        close, value, tag = _lit("\n</parameter>\n"), f"{rule}_v{j}", f"<parameter={p}>"
        if token:  # lazy: the value (its leading line break included) ends at the first close tag
            rules += [f"{value}[suffix={close}]: {body}", f"{rule}_p{j}: {_lit(tag)} {value}"]
        else:
            rules += [f"{value}: {body}", f"{rule}_p{j}: {_lit(tag + chr(10))} {value} {close}"]
        seq.append(f"{rule}_p{j}" + ("" if p in required else "?"))
    head = _lit(f"<tool_call>\n<function={name}>\n")
    return rules + [f"{rule}: {head} {' '.join(seq)} {_lit(chr(10).join(['</function>', '</tool_call>']))}"]


def harmony_rules(rule: str, name: str, parameters: Any) -> list[str]:
    """Lark rules defining `rule`: one Harmony commentary message calling functions.`name`."""
    head = _lit(f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>")
    return [f"{rule}: {head} {_json(parameters)}"]


def harmony_start(calls: str) -> str:
    """The start rule: an optional analysis message, then `calls` (a rule expression)."""
    thought = r'HARMONY_THOUGHT: /(?s:.*)/ & ~/(?s:.*<\|.*)/'
    analysis = '"<|channel|>analysis<|message|>" HARMONY_THOUGHT <|end|> "<|start|>assistant"'
    return f"start: ({analysis})? {calls}\n{thought}\n"
