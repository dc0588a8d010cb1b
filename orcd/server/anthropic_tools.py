"""Tool use on /v1/messages: Anthropic's `tools` and `tool_choice` as the chat template's tools, `tool_use`
and `tool_result` blocks of the history as template tool calls and tool messages, and the model's calls
(parsed by orcd.server.tools) as `tool_use` content blocks."""

from __future__ import annotations

import json
import uuid
from typing import Any

from orcd.errors import RequestError

_RESULT_KEYS = {"type", "tool_use_id", "content", "is_error", "cache_control"}
_USE_KEYS = {"type", "id", "name", "input", "cache_control"}
_THINKING_KEYS = {"thinking": {"type", "thinking", "signature"}, "redacted_thinking": {"type", "data"}}


def template_tools(tools: list[Any] | None, tool_choice: dict[str, Any] | None) -> list[dict] | None:
    """Anthropic tools -> template tools (OpenAI's function shape, as transformers passes them), or None
    when none are to be offered. tool_choice `auto` and `none` are honoured here; `any` and `tool` also
    force a call (forced_choice, enforced by a grammar)."""
    kind = (tool_choice or {}).get("type", "auto")
    if kind not in ("auto", "none", "any", "tool") or set(tool_choice or {}) - {
            "type", "name", "disable_parallel_tool_use"}:
        raise RequestError("tool_choice: must be {\"type\": \"auto\" | \"none\" | \"any\"} or {\"type\": "
                           "\"tool\", \"name\": ...}", param="tool_choice")
    if not isinstance((tool_choice or {}).get("disable_parallel_tool_use", False), bool):
        raise RequestError("tool_choice.disable_parallel_tool_use: must be a boolean",
                           param="tool_choice.disable_parallel_tool_use")
    if kind in ("any", "tool") and not tools:
        raise RequestError(f"tool_choice: {kind!r} needs tools", param="tool_choice")
    if kind == "tool" and not any(isinstance(t, dict) and t.get("name") == tool_choice.get("name")
                                  for t in tools or []):
        raise RequestError(f"tool_choice.name: no tool named {tool_choice.get('name')!r}",
                           param="tool_choice.name")
    if not tools or kind == "none":
        return None
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"] or not isinstance(
                t.get("input_schema"), dict) or t.get("type", "custom") != "custom":
            raise RequestError(f"tools.{i}: must be a custom tool with a `name` and an object `input_schema` "
                               "(server tools are not supported)", param=f"tools.{i}")
        fn = {"name": t["name"], "parameters": t["input_schema"]}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def forced_choice(tool_choice: dict[str, Any] | None) -> Any:
    """Anthropic's forcing tool_choice as OpenAI's (orcd.structured.tool_grammar): `any` -> "required",
    `tool` -> the named function; None when the model may answer without a call."""
    kind = (tool_choice or {}).get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": tool_choice["name"]}}
    return None


def parallel_forced(tool_choice: dict[str, Any] | None) -> bool:
    """A forced choice allows several calls only when `disable_parallel_tool_use: false` is given (as the
    OpenAI routes need `parallel_tool_calls: true`): unset, a forced call is one call."""
    return (tool_choice or {}).get("disable_parallel_tool_use") is False


def _result_text(content: Any, at: str) -> str:
    if isinstance(content, str) or content is None:
        return content or ""
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                         and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    raise RequestError(f"{at}: a tool result's content must be a string or text blocks", param=at)


def _check_keys(block: dict, allowed: set[str], at: str) -> None:
    extra = sorted(set(block) - allowed)
    if extra:
        raise RequestError(f"{at}.{extra[0]}: unrecognized field of a {block['type']} block",
                           param=f"{at}.{extra[0]}")


def earlier_thinking(block: dict, role: str, at: str) -> bool:
    """Whether `block` is an assistant turn's thinking (`thinking` / `redacted_thinking`), which clients
    send back with the history (Anthropic asks them to, around tool use): checked, then left out of the
    prompt, as chat templates drop earlier turns' reasoning."""
    kind = block.get("type")
    if kind not in _THINKING_KEYS or role != "assistant":
        return False
    _check_keys(block, _THINKING_KEYS[kind], at)
    return True


def history(role: str, blocks: list[dict], where: str) -> list[dict]:
    """One Anthropic message with tool blocks -> template messages: an assistant turn with `tool_calls`,
    or a user turn's `tool_result` blocks as `tool` messages (then its text, if any, as a user message)."""
    texts, calls, results = [], [], []
    for j, block in enumerate(blocks):
        at, kind = f"{where}.{j}", block.get("type")
        if earlier_thinking(block, role, at):
            continue
        if kind == "tool_use" and role == "assistant":
            _check_keys(block, _USE_KEYS, at)
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
                raise RequestError(f"{at}: a tool_use block needs `name` and an object `input`", param=at)
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block["name"], "arguments": block["input"]}})
        elif kind == "tool_result" and role == "user":
            _check_keys(block, _RESULT_KEYS, at)
            if not isinstance(block.get("tool_use_id"), str):
                raise RequestError(f"{at}.tool_use_id is required", param=f"{at}.tool_use_id")
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _result_text(block.get("content"), f"{at}.content")})
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            allowed = "tool_use" if role == "assistant" else "tool_result"
            raise RequestError(f"{at}.type: a {role} message may hold text and {allowed} blocks (got "
                               f"{kind!r})", param=f"{at}.type")
    text = "".join(texts)
    if role == "assistant":
        return [{"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}]
    return results + ([{"role": "user", "content": text}] if text or not results else [])


def has_tool_blocks(blocks: Any) -> bool:
    kinds = ("tool_use", "tool_result")
    return isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") in kinds for b in blocks)


def new_tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def tool_use_block(payload: str) -> dict:
    """A parsed call ({"name", "arguments"} JSON) -> a tool_use block; arguments that are not a JSON
    object are passed as {"arguments": text}, so the block stays valid."""
    call = json.loads(payload)
    try:
        args = json.loads(call["arguments"])
    except json.JSONDecodeError:
        args = None
    return {"type": "tool_use", "id": new_tool_use_id(), "name": call["name"],
            "input": args if isinstance(args, dict) else {"arguments": call["arguments"]}}
