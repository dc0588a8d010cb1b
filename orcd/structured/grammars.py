"""Request fields -> llguidance grammar strings, checked without a tokenizer (a 400 naming the field).

response_format (chat and completions):
- {"type": "text"}: no grammar;
- {"type": "json_object"}: any JSON object;
- {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}: JSON valid against
  `schema` (strict or not: the output always matches the schema);
- orcd: {"type": "regex", "regex": "..."}: text matching the regex in full;
- orcd: {"type": "grammar", "grammar": "..."}: a Lark grammar (llguidance's dialect, `start` rule), or GBNF
  (llama.cpp's, `root ::= ...`) when it holds `::=`.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from orcd.errors import RequestError

MAX_GRAMMAR_CHARS = 1 << 20  # a schema / regex / grammar text larger than this is refused
_JSON_OPTIONS = {"whitespace_flexible": False}  # compact JSON: "key":value, fewer tokens to sample


def _refuse(param: str, why: str) -> RequestError:
    return RequestError(f"{param}: {why}", param=param)


def _checked(grammar: str, param: str) -> str:
    err = llguidance.LLMatcher.validate_grammar(grammar)
    if err:
        raise _refuse(param, f"does not compile: {err.strip()}")
    return grammar


def json_schema_grammar(schema: Any, param: str) -> str:
    """A JSON schema (dict, or True for any JSON value) -> grammar; 400 naming `param` if it is not one
    llguidance can enforce."""
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        raise _refuse(param, "must be a JSON schema object")
    text = json.dumps(schema)
    if len(text) > MAX_GRAMMAR_CHARS:
        raise _refuse(param, f"is larger than {MAX_GRAMMAR_CHARS} characters")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=_JSON_OPTIONS)
    except ValueError as err:
        raise _refuse(param, f"is not a valid JSON schema: {err}") from None
    return _checked(grammar, param)


def regex_grammar(regex: Any, param: str) -> str:
    if not isinstance(regex, str) or not regex or len(regex) > MAX_GRAMMAR_CHARS:
        raise _refuse(param, "must be a non-empty regular expression string")
    return _checked(llguidance.LLMatcher.grammar_from_regex(regex), param)


def text_grammar(source: Any, param: str) -> str:
    """Lark (llguidance's dialect) or, when it holds `::=`, GBNF."""
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_GRAMMAR_CHARS:
        raise _refuse(param, "must be a non-empty Lark or GBNF grammar string")
    try:
        lark = gbnf_to_lark(source) if "::=" in source else source
    except Exception as err:  # noqa: BLE001 - the converter raises plain exceptions on bad GBNF
        raise _refuse(param, f"is not valid GBNF: {err}") from None
    return _checked(llguidance.LLMatcher.grammar_from_lark(lark), param)


def _one_of(rf: dict, key: str, allowed: set[str]) -> None:
    extra = sorted(set(rf) - allowed)
    if extra:
        raise _refuse(f"{key}.{extra[0]}", "unrecognized field")


def response_format_grammar(rf: Any, key: str = "response_format") -> str | None:
    """The grammar a response_format asks for, None for text (or no response_format)."""
    if rf is None:
        return None
    if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
        raise _refuse(key, "must be an object with a `type`")
    kind = rf["type"]
    if kind == "text":
        _one_of(rf, key, {"type"})
        return None
    if kind == "json_object":
        _one_of(rf, key, {"type"})
        return json_schema_grammar({"type": "object"}, key)
    if kind == "json_schema":
        _one_of(rf, key, {"type", "json_schema"})
        spec = rf.get("json_schema")
        if not isinstance(spec, dict):
            raise _refuse(f"{key}.json_schema", "must be an object with `name` and `schema`")
        _one_of(spec, f"{key}.json_schema", {"name", "schema", "strict", "description"})
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            raise _refuse(f"{key}.json_schema.name", "is required (a string)")
        if spec.get("strict") not in (None, True, False):
            raise _refuse(f"{key}.json_schema.strict", "must be a boolean")
        return json_schema_grammar(spec.get("schema", True), f"{key}.json_schema.schema")
    if kind == "regex":
        _one_of(rf, key, {"type", "regex"})
        return regex_grammar(rf.get("regex"), f"{key}.regex")
    if kind == "grammar":
        _one_of(rf, key, {"type", "grammar"})
        return text_grammar(rf.get("grammar"), f"{key}.grammar")
    raise _refuse(f"{key}.type", f"{kind!r} is not one of text, json_object, json_schema, regex, grammar")
