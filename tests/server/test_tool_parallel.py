"""Parallel forced tool calls: the Llama 3.x JSON grammar allows calls joined by `; ` only when asked
(Harmony stays at one call: <|call|> ends its generation), and the Llama scanner reads them back; on the
live server /v1/responses (`parallel_tool_calls: true`) and /v1/messages (`disable_parallel_tool_use:
false`) with a forced choice give one or more valid calls, exactly one when not asked; unforced,
`parallel_tool_calls: false` on /v1/responses keeps the first streamed call only."""

from __future__ import annotations

import json

import anthropic
import pytest

from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.server.responses_stream import OutputBuilder
from orcd.server.tools import message_fields, with_tools
from orcd.structured.backend import GrammarBackend
from orcd.structured.mask import unpack_bitmask
from orcd.structured.tool_grammar import forced_tool_grammar
from orcd.tokenizer import load_tokenizer

MODEL = "tiny-qwen2"
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": ZONE}}
CALL = '{"name":"get_time","parameters":{"zone":"UTC"}}'


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return GrammarBackend(load_tokenizer(synthetic_tokenizer_metadata(400, "qwen2", seed=1)))


def accepts(backend: GrammarBackend, grammar: str, text: str) -> bool:
    """Every token of `text` is allowed by the mask before it, and the grammar is complete after them."""
    m = backend.matcher(grammar)
    for t in backend.tokenizer.encode(text):
        if not unpack_bitmask(backend.fill([m]), backend.vocab_size)[0, t]:
            return False
        m.consume(t)
    return m.m.is_accepting()


def test_llama_json_calls_join_only_when_asked(backend):
    two = f"{CALL}; {CALL}"
    assert accepts(backend, forced_tool_grammar([TIME], "required", "llama", parallel=True), CALL)
    assert accepts(backend, forced_tool_grammar([TIME], "required", "llama", parallel=True), two)
    assert not accepts(backend, forced_tool_grammar([TIME], "required", "llama"), two)
    msg = message_fields(with_tools(None, False, "llama")(), two)
    assert msg["content"] is None and [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]] == [
        {"zone": "UTC"}] * 2


def test_llama_calls_split_outside_strings():
    text = '{"name": "f", "parameters": {"q": "a; b"}} ; {"name": "g", "parameters": {}}'
    msg = message_fields(with_tools(None, False, "llama")(), text)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == [
        ("f", {"q": "a; b"}), ("g", {})]
    assert message_fields(with_tools(None, False, "llama")(), '{"name": "f"} and text')["content"] == \
        '{"name": "f"} and text'


def test_harmony_stays_at_one_call():
    assert forced_tool_grammar([TIME], "required", "harmony", parallel=True) == \
        forced_tool_grammar([TIME], "required", "harmony")


def _zone(arguments: str) -> None:
    assert json.loads(arguments)["zone"] in ("UTC", "CET")


def test_responses_parallel_forced_calls(oai):
    tool = {"type": "function", "name": "get_time", "parameters": ZONE}
    counts = []
    for seed in range(3):
        r = oai.responses.create(model=MODEL, input="Time?", tools=[tool], tool_choice="required",
                                 parallel_tool_calls=True, max_output_tokens=400, extra_body={"seed": seed})
        calls = [o for o in r.output if o.type == "function_call"]
        if r.status == "completed":  # else max_output_tokens cut the last call
            for call in calls:
                _zone(call.arguments)
        counts.append(len(calls))
    assert min(counts) >= 1 and max(counts) >= 2, counts
    one = oai.responses.create(model=MODEL, input="Time?", tools=[tool], tool_choice="required",
                               max_output_tokens=400, extra_body={"seed": 0})
    assert [o.type for o in one.output] == ["function_call"] and one.status == "completed"


def test_anthropic_parallel_forced_calls(claude):
    tool, ask = {"name": "get_time", "input_schema": ZONE}, [{"role": "user", "content": "Time?"}]
    many = {"type": "any", "disable_parallel_tool_use": False}
    counts = []
    for seed in range(3):
        msg = claude.messages.create(model=MODEL, max_tokens=400, messages=ask, tools=[tool],
                                     tool_choice=many, extra_body={"seed": seed})
        uses = [b for b in msg.content if b.type == "tool_use"]
        if msg.stop_reason == "tool_use":
            assert all(u.input["zone"] in ("UTC", "CET") for u in uses)
        counts.append(len(uses))
    assert min(counts) >= 1 and max(counts) >= 2, counts
    one = claude.messages.create(model=MODEL, max_tokens=400, messages=ask, tools=[tool],
                                 tool_choice={"type": "any"}, extra_body={"seed": 0})
    assert [b.type for b in one.content] == ["tool_use"] and one.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=MODEL, max_tokens=4, messages=ask, tools=[tool],
                               tool_choice={"type": "any", "disable_parallel_tool_use": "no"})
    assert "tool_choice.disable_parallel_tool_use" in info.value.message


def test_streamed_calls_past_the_first_are_dropped_without_parallel_calls():
    """parallel_tool_calls=false: the first call streams its arguments; the second sends nothing."""
    events: list[tuple[str, dict]] = []
    builder = OutputBuilder(with_tools(None, harmony=False), False,
                            lambda name, data: events.append((name, json.loads(json.dumps(data)))))
    for text in ['<tool_call>{"name": "get_weather", "arguments": {"ci', 'ty": "Oslo"}}</tool_call>\n',
                 '<tool_call>{"name": "get_weather", "arguments": {"city"', ': "Rome"}}</tool_call>']:
        builder.push(text)
    builder.push("", final=True)
    builder.finish("completed")
    assert [(i["type"], i["arguments"], i["status"]) for i in builder.items] == [
        ("function_call", '{"city": "Oslo"}', "completed")]
    assert [d["delta"] for e, d in events if e == "response.function_call_arguments.delta"] == [
        '{"ci', 'ty": "Oslo"}']
    assert [e for e, _ in events].count("response.output_item.done") == 1
