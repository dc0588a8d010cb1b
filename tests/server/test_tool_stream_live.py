"""Function-call arguments stream as the model writes them, through the real `orcd serve` of these tests
(tiny Qwen2 model: Hermes `<tool_call>` format; the call forced by grammar so the random model writes
one), assembled by the official clients' stream helpers: openai `chat.completions.stream` and anthropic
`messages.stream`. The pieces join to the final arguments, which equal the non-streamed call's."""

from __future__ import annotations

import json

import pytest

MODEL = "tiny-qwen2"
PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "days"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": PARAMS}}
ASK = [{"role": "user", "content": "Weather in Oslo for 3 days?"}]


def test_openai_stream_helper_assembles_argument_deltas(oai):
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=200,
              temperature=0)
    whole = oai.chat.completions.create(**kw).choices[0].message.tool_calls[0].function
    with oai.chat.completions.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    deltas = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    (call,) = final.choices[0].message.tool_calls
    assert len(deltas) > 2  # token by token, not one piece at the end
    assert "".join(deltas) == done.arguments == call.function.arguments == whole.arguments
    assert call.function.name == whole.name == "get_weather" and call.id.startswith("call_")
    assert set(json.loads(call.function.arguments)) == {"city", "days"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_anthropic_stream_helper_assembles_input_json_deltas(claude):
    tool = {"name": "get_weather", "description": "Weather of a city", "input_schema": PARAMS}
    kw = dict(model=MODEL, max_tokens=200, messages=ASK, tools=[tool], tool_choice={"type": "any"},
              extra_body={"temperature": 0})
    whole = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [e.delta.partial_json for e in events
              if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(pieces) > 2
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert json.loads("".join(pieces)) == use.input == whole.content[-1].input
    assert set(use.input) == {"city", "days"} and use.id.startswith("toolu_")
    assert final.stop_reason == whole.stop_reason == "tool_use"


def test_langchain_and_litellm_assemble_streamed_calls(oai, server, monkeypatch):
    """Frameworks that merge tool-call chunks by index get the same call as the non-streamed request."""
    langchain_openai = pytest.importorskip("langchain_openai")
    litellm = pytest.importorskip("litellm")
    monkeypatch.setenv("LANGSMITH_TRACING", "false")  # offline
    kw = dict(messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=200, temperature=0)
    whole = oai.chat.completions.create(model=MODEL, **kw).choices[0].message.tool_calls[0].function
    llm = langchain_openai.ChatOpenAI(base_url=server.url + "/v1", api_key=server.api_key, model=MODEL,
                                      max_retries=0, timeout=60, max_tokens=200, temperature=0)
    chunks = list(llm.bind_tools([WEATHER], tool_choice="required").stream(ASK[0]["content"]))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert sum(bool(c.tool_call_chunks) for c in chunks) > 2
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("get_weather",
                                                                     json.loads(whole.arguments))]
    parts = list(litellm.completion(model="openai/" + MODEL, api_base=server.url + "/v1",
                                    api_key=server.api_key, stream=True, **kw))
    (call,) = litellm.stream_chunk_builder(parts).choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", whole.arguments)
