"""Forced tool calls through a real `orcd serve` (CPU, tiny random models) in the two formats that are not
JSON objects: Qwen3-Coder's XML (`coder`) and gpt-oss Harmony (`harmony`), with the official clients."""

from __future__ import annotations

import json

import pytest
from conftest import API_KEY
from test_structured_live import TIME, WEATHER

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

ASK = [{"role": "user", "content": "Weather?"}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _checked(call) -> str:
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return call.function.name


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_coder_forced_calls_validate(oai, choice):
    for seed in range(3):
        r = oai.chat.completions.create(model="coder", messages=ASK, tools=[WEATHER, TIME],
                                        tool_choice=choice, max_tokens=256, seed=seed)
        (call,) = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and not r.choices[0].message.content
        assert _checked(call) == "get_weather" or choice == "required"


def test_coder_forced_call_streams_and_anthropic_any(oai, demo_server):
    stream = oai.chat.completions.create(model="coder", messages=ASK, tools=[WEATHER], tool_choice="required",
                                         max_tokens=256, seed=1, stream=True)
    calls = [tc for chunk in stream if chunk.choices for tc in chunk.choices[0].delta.tool_calls or []]
    assert calls and calls[0].function.name == "get_weather"
    args = "".join(c.function.arguments or "" for c in calls)
    jsonschema.validate(json.loads(args), SCHEMAS["get_weather"])
    anthropic = pytest.importorskip("anthropic")
    claude = anthropic.Anthropic(base_url=demo_server.url, api_key=API_KEY, max_retries=0)
    m = claude.messages.create(model="coder", max_tokens=256, messages=ASK, tool_choice={"type": "any"},
                               tools=[{"name": "get_time", "input_schema": SCHEMAS["get_time"]}])
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use.name == "get_time"
    jsonschema.validate(use.input, SCHEMAS["get_time"])


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_harmony_forced_calls_validate(oai, choice):
    """The grammar lets gpt-oss reason first (an analysis message of any length), so a random model may
    spend max_tokens thinking: those answers end by length; every one that ends calls validly."""
    called = 0
    for seed in range(4):
        r = oai.chat.completions.create(model="harmony", messages=ASK, tools=[WEATHER, TIME],
                                        tool_choice=choice, max_tokens=128, seed=seed)
        c = r.choices[0]
        if c.finish_reason == "length":
            assert not c.message.tool_calls and not c.message.content
            continue
        (call,) = c.message.tool_calls
        assert c.finish_reason == "tool_calls" and not c.message.content
        assert _checked(call) == "get_weather" or choice == "required"
        called += 1
    assert called


@pytest.mark.parametrize("model", ["demo", "coder"])
def test_parallel_required_calls_all_validate(oai, model):
    """parallel_tool_calls=true with "required": one or more calls, each valid (unset: exactly one). A
    random model may go on calling until max_tokens: then the cut call is content, as written."""
    counts = []
    for seed in range(4):
        r = oai.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME],
                                        tool_choice="required", parallel_tool_calls=True, max_tokens=256,
                                        seed=seed)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and not c.message.content or \
            c.finish_reason == "length" and c.message.content.startswith("<tool_call>")
        counts.append(len(c.message.tool_calls or []))
        for call in c.message.tool_calls or []:
            _checked(call)
    assert min(counts) >= 1 and (model == "coder" or max(counts) >= 2), counts  # demo: 4 each, coder: 1


@pytest.mark.parametrize("model", ["coder", "harmony"])
def test_responses_forced_call(oai, model):
    """/v1/responses with tool_choice "required": a function_call item whose arguments validate."""
    tool = {"type": "function", "name": "get_time", "parameters": SCHEMAS["get_time"]}
    r = oai.responses.create(model=model, input="Time?", tools=[tool], tool_choice="required",
                             max_output_tokens=256)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_time"
    jsonschema.validate(json.loads(call.arguments), SCHEMAS["get_time"])
