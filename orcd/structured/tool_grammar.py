"""Forced tool calls (`tool_choice` "required" or a named function; Anthropic `any` / `tool`): a grammar
that makes the model write exactly one call, in its chat template's format, whose arguments validate
against the function's `parameters` schema.

Formats (the `style` orcd.server.tools.tool_style picks from the template):
- hermes (Qwen2.5/Qwen3/Hermes/QwQ): `<tool_call>\\n{"name":"NAME","arguments":{...}}\\n</tool_call>`
- llama (Llama 3.x JSON calls): `{"name":"NAME","parameters":{...}}` (several: joined by `; `)
- mistral (templates with `[TOOL_CALLS]`): `[TOOL_CALLS][{"name":"NAME","arguments":{...}}]` (orcd's
  vocabulary loader keeps `[TOOL_CALLS]` a text token, so the literal matches the model's own token)
- coder (Qwen3-Coder XML in `<tool_call>`) and harmony (gpt-oss `commentary to=functions.NAME`): the rules
  of orcd.structured.call_grammars
"""

from __future__ import annotations

import json
from typing import Any

import llguidance

from orcd.errors import RequestError
from orcd.structured.call_grammars import coder_rules, harmony_rules, harmony_start
from orcd.structured.grammars import json_schema_grammar

STYLES = {"hermes": ("<tool_call>\n", "arguments", "\n</tool_call>"), "llama": ("", "parameters", ""),
          "mistral": ("[TOOL_CALLS][", "arguments", "]")}


def call_schema(name: str, parameters: Any, args_key: str = "arguments") -> dict:
    """The JSON schema of one call of function `name`."""
    return {"type": "object", "properties": {"name": {"const": name}, args_key: parameters},
            "required": ["name", args_key], "additionalProperties": False}


def _parameters(fn: dict, i: int) -> Any:
    """A function's parameters schema ({"type": "object"} when absent), checked on its own so a bad one
    is named by its index."""
    params = fn.get("parameters")
    params = {"type": "object"} if params is None else params
    json_schema_grammar(params, f"tools.{i}.function.parameters")
    return params


def chosen_tools(tools: list[dict], choice: Any) -> list[tuple[int, dict]]:
    """(index, function) of the tools a forced choice allows: every one for "required", the named one for
    {"type": "function", "function": {"name": ...}}."""
    fns = [(i, t["function"]) for i, t in enumerate(tools)]
    if choice == "required":
        return fns
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise RequestError("tool_choice: must be \"auto\", \"none\", \"required\" or {\"type\": "
                           "\"function\", \"function\": {\"name\": ...}}", param="tool_choice")
    picked = [(i, fn) for i, fn in fns if fn.get("name") == name]
    if not picked:
        at = "tool_choice.function.name"
        raise RequestError(f"{at}: no tool named {name!r}", param=at)
    return picked[:1]


def forced_tool_grammar(tools: list[dict], choice: Any, style: str = "hermes", parallel: bool = False) -> str:
    """tools: OpenAI tools ({"type": "function", "function": {"name", "parameters"}}), already checked;
    choice: "required" or a named function. -> the grammar of one call in `style`'s format, or with
    `parallel` one or more where the format writes several in one answer (hermes, coder, mistral, Llama
    3.x JSON joined by `; `; Harmony stays at one: its <|call|> ends the generation after each call)."""
    if style in STYLES:
        lark = _json_lark(tools, choice, style, parallel)
    elif style in ("coder", "harmony"):
        lark = _rules_lark(tools, choice, style, parallel)
    else:
        raise RequestError(f"tool_choice: forcing a call is not supported for this model's tool-call format "
                           f"({style}): use \"auto\"", param="tool_choice")
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    err = llguidance.LLMatcher.validate_grammar(grammar)
    if err:
        raise RequestError(f"tools: the forced call does not compile: {err.strip()}", param="tools")
    return grammar


def _calls(unit: str, sep: str | None) -> str:
    """The lark expression of one `unit`, or with a separator one or more joined by it."""
    return unit if sep is None else f"{unit} ({json.dumps(sep)} {unit})*"


def _json_lark(tools: list[dict], choice: Any, style: str, parallel: bool) -> str:
    """Calls as JSON objects (hermes, llama, mistral) between the style's head and tail."""
    head, args_key, tail = STYLES[style]
    options = [call_schema(fn["name"], _parameters(fn, i), args_key) for i, fn in chosen_tools(tools, choice)]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    body = json.dumps(schema | {"x-guidance": {"whitespace_flexible": False}})
    call = f"call: %json {body}\n"
    if style == "hermes":  # several: whole blocks on their own lines
        one = f"one: {json.dumps(head)} call {json.dumps(tail)}\n"
        return f"start: {_calls('one', chr(10) if parallel else None)}\n{one}{call}"
    if style == "mistral":  # several: one JSON list
        calls = _calls("call", ", " if parallel else None)
        return f"start: {json.dumps(head)} {calls} {json.dumps(tail)}\n{call}"
    return f"start: {_calls('call', '; ' if parallel else None)}\n{call}"  # llama


def _rules_lark(tools: list[dict], choice: Any, style: str, parallel: bool) -> str:
    """Calls in Qwen3-Coder's XML or Harmony: a rule per allowed function, the start one of them."""
    rules, names = [], []
    for i, fn in chosen_tools(tools, choice):
        params, rule = _parameters(fn, i), f"call{i}"
        at = f"tools.{i}.function.parameters"
        rules += coder_rules(rule, fn["name"], params, at) if style == "coder" else \
            harmony_rules(rule, fn["name"], params)
        names.append(rule)
    calls = "(" + " | ".join(names) + ")"
    start = f"start: {_calls(calls, chr(10) if parallel else None)}\n" if style == "coder" else \
        harmony_start(calls)
    return start + "".join(r + "\n" for r in rules)
