"""Anthropic Messages API (/v1/messages) against the real `orcd serve` of these tests, with the official
`anthropic` client: the same tokens as the OpenAI chat route for the same conversation, streamed events in
Anthropic's order, stop sequences, prefill, count_tokens, and errors in Anthropic's shape naming the field."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from server_helpers import sse_blocks

MODEL = "tiny-qwen2"
ASK = [{"role": "user", "content": "Write a haiku about rain."}]
GREEDY = {"temperature": 0}  # sampling knobs the 2.x SDK no longer names: sent as extra_body


def test_message_equals_openai_chat(claude, oai):
    system = "You are terse."
    msg = claude.messages.create(model=MODEL, max_tokens=12, messages=ASK, extra_body=GREEDY,
                                 system=[{"type": "text", "text": "You are "},
                                         {"type": "text", "text": "terse."}])
    chat = oai.chat.completions.create(model=MODEL, max_tokens=12, extra_body=GREEDY,
                                       messages=[{"role": "system", "content": system}, *ASK])
    assert (msg.type, msg.role, msg.model) == ("message", "assistant", MODEL) and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == chat.choices[0].message.content
    # Anthropic's split: input_tokens computed + cache_read_input_tokens served by the prefix cache
    prompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    assert (prompt, msg.usage.output_tokens) == (chat.usage.prompt_tokens, 12)
    assert msg.stop_reason == "max_tokens" and msg.stop_sequence is None
    n = claude.messages.count_tokens(model=MODEL, system=system, messages=ASK).input_tokens
    assert n == prompt


def test_stream_matches_and_events_are_in_order(claude, server):
    kw = dict(model=MODEL, max_tokens=16, messages=ASK,
              extra_body={"temperature": 0.8, "top_p": 0.9, "top_k": 40, "seed": 5})
    # no seed on this API: greedy pieces are compared below; here the stream must be self-consistent
    with claude.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].text == text and 1 <= final.usage.output_tokens <= 16
    assert final.stop_reason == ("max_tokens" if final.usage.output_tokens == 16 else "end_turn")
    body = {**{k: v for k, v in kw.items() if k != "extra_body"}, "temperature": 0, "stream": True}
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c, \
            c.stream("POST", "/v1/messages", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [(e, json.loads(d)) for e, d in sse_blocks(r) if e not in ("comment", "ping")]
    names = [e for e, _ in events]
    assert all(e == d["type"] for e, d in events)
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert events[0][1]["message"]["usage"]["output_tokens"] == 0
    streamed = "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")
    whole = claude.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body=GREEDY)
    assert streamed == whole.content[0].text
    assert events[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


def test_stop_sequence_and_prefill(claude, server):
    text = claude.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body=GREEDY).content[0].text
    stop = next(text[i:i + 2] for i in range(4, len(text) - 2) if text[i:i + 2].strip() == text[i:i + 2])
    msg = claude.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body=GREEDY,
                                 stop_sequences=[stop])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert msg.content[0].text == text[: text.find(stop)]
    with claude.messages.stream(model=MODEL, max_tokens=24, messages=ASK, extra_body=GREEDY,
                                stop_sequences=["\x00never", stop]) as s:
        assert s.get_final_message().stop_sequence == stop
    # prefill: a final assistant message is continued (its text after the rendered prompt), not repeated
    head = "Rain falls"
    cont = claude.messages.create(model=MODEL, max_tokens=8, extra_body=GREEDY,
                                  messages=[*ASK, {"role": "assistant", "content": head}])
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        ids = c.post("/tokenize", json={"messages": ASK}).json()["tokens"]
        ids += c.post("/tokenize", json={"prompt": head, "add_special_tokens": False}).json()["tokens"]
        raw = c.post("/v1/completions", json={"model": MODEL, "prompt": ids, "max_tokens": 8,
                                              **GREEDY}).json()
    assert cont.content[0].text == raw["choices"][0]["text"]
    n = claude.messages.count_tokens(model=MODEL, messages=[*ASK, {"role": "assistant", "content": head}])
    assert cont.usage.input_tokens + cont.usage.cache_read_input_tokens == len(ids) == n.input_tokens


@pytest.mark.parametrize("change, field", [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"tools": [{"name": "f"}]}, "tools.0"),
    ({"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}},
     "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"stop_sequences": [""]}, "stop_sequences"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"thinking": {"type": "adaptive", "budget": 3}}, "thinking.budget"),
    ({"thinking": {"type": "enabled", "budget_tokens": "9"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "adaptive", "display": "full"}}, "thinking.display"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"output_config": {"effort": "minimal"}}, "output_config.effort"),  # OpenAI's, not Anthropic's
    ({"output_config": {"verbosity": "low"}}, "output_config.verbosity"),
    ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": 5}}}},
     "output_config.format.schema"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}}}, "tool_choice": {"type": "any"},
      "tools": [{"name": "f", "input_schema": {"type": "object"}}]}, "output_config.format"),
    ({"max_tokens": 10 ** 6}, "max_tokens"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_errors_name_the_field(server, change, field):
    body = {"model": MODEL, "max_tokens": 4, "messages": ASK, **change}
    body = {k: v for k, v in body.items() if v is not None}
    r = httpx.post(server.url + "/v1/messages", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"]


def test_client_errors(claude):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="nope", max_tokens=4, messages=ASK)
    assert info.value.body["error"]["type"] == "not_found_error" and "nope" in info.value.message
    with pytest.raises(anthropic.BadRequestError, match="tool_choice"):
        claude.messages.create(model=MODEL, max_tokens=4, messages=ASK, tool_choice={"type": "any"})


WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
TOOL_HISTORY = [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, {
                    "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": [{"type": "text", "text": "12 C, rain"}]}]}]


def test_tool_history_becomes_template_messages():
    from orcd.server.anthropic_format import MessagesRequest, template_messages

    body = MessagesRequest(model=MODEL, max_tokens=4, messages=TOOL_HISTORY, tools=[WEATHER])
    msgs, prefill, tools, variables = template_messages(body)
    assert prefill is None and variables == {} and tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "Weather of a city"}}]
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert msgs[1] == {"role": "assistant", "content": "Checking.",
                       "tool_calls": [{"id": "toolu_1", "type": "function", "function": call}]}
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "12 C, rain"}
    none = MessagesRequest(model=MODEL, max_tokens=4, messages=ASK, tools=[WEATHER],
                           tool_choice={"type": "none"})
    assert template_messages(none)[2] is None


def test_calls_become_tool_use_blocks_and_events():
    from orcd.server.anthropic_format import ContentBuilder
    from orcd.server.tools import with_tools

    events: list[tuple[str, dict]] = []
    content = ContentBuilder(with_tools(None, harmony=False), False, lambda n, d: events.append((n, d)))
    for piece in ["Sure. <tool_", 'call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
                  ""]:
        content.push(piece, final=not piece)
    assert content.called and [b["type"] for b in content.blocks] == ["text", "tool_use"]
    use = content.blocks[1]
    assert use["id"].startswith("toolu_") and (use["name"], use["input"]) == ("get_weather", {"city": "Oslo"})
    assert [n for n, _ in events] == ["content_block_start", "content_block_delta", "content_block_stop",
                                      "content_block_start", "content_block_delta", "content_block_stop"]
    assert events[3][1]["content_block"] == {**use, "input": {}}
    assert json.loads(events[4][1]["delta"]["partial_json"]) == {"city": "Oslo"}


def test_route_takes_tools_and_history(claude):
    msg = claude.messages.create(model=MODEL, max_tokens=6, messages=TOOL_HISTORY, tools=[WEATHER],
                                 extra_body={"seed": 1})
    assert msg.stop_reason in ("end_turn", "max_tokens", "tool_use") and msg.usage.input_tokens > 10
    n = claude.messages.count_tokens(model=MODEL, messages=TOOL_HISTORY, tools=[WEATHER]).input_tokens
    assert n == msg.usage.input_tokens + msg.usage.cache_read_input_tokens


def test_earlier_thinking_blocks_are_taken_and_left_out(claude, server):
    """An assistant turn's thinking / redacted_thinking blocks, sent back as Anthropic asks clients to, are
    accepted and not rendered (the prompt is the one without them); in a user turn, or with an unknown
    key, they are a 400 naming where."""
    thought = [{"type": "thinking", "thinking": "The user wants rain.", "signature": "sig"},
               {"type": "redacted_thinking", "data": "opaque"}]
    plain = [*ASK, {"role": "assistant", "content": [{"type": "text", "text": "Drops fall."}]},
             {"role": "user", "content": "Another."}]
    with_thought = [plain[0], {"role": "assistant", "content": [*thought, *plain[1]["content"]]}, plain[2]]
    tools = [*TOOL_HISTORY[:1], {"role": "assistant", "content": [*thought, *TOOL_HISTORY[1]["content"]]},
             *TOOL_HISTORY[2:]]
    for bare, sent, kw in ((plain, with_thought, {}), (TOOL_HISTORY, tools, {"tools": [WEATHER]})):
        counts = [claude.messages.count_tokens(model=MODEL, messages=m, **kw).input_tokens
                  for m in (bare, sent)]
        assert counts[0] == counts[1]
        msg = claude.messages.create(model=MODEL, max_tokens=4, messages=sent, extra_body={"seed": 2}, **kw)
        assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == counts[0]
    bad = [([{"role": "user", "content": thought}], "messages.0.content.0.type"),
           ([ASK[0], {"role": "assistant", "content": [{**thought[0], "extra": 1}]}, ASK[0]],
            "messages.1.content.0.extra")]
    for messages, where in bad:
        body = {"model": MODEL, "max_tokens": 4, "messages": messages}
        r = httpx.post(server.url + "/v1/messages", json=body, headers=server.headers, timeout=30)
        assert r.status_code == 400 and where in r.json()["error"]["message"], r.text


def test_middleware_errors_in_anthropic_shape(server):
    r = httpx.post(server.url + "/v1/messages", json={"model": MODEL, "max_tokens": 1, "messages": ASK},
                   headers={"x-api-key": "wrong"}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(server.url + "/v1/messages", content=b"x" * 70000, headers=server.headers, timeout=30)
    assert r.status_code == 413 and r.json() == {"type": "error", "error": {
        "type": "request_too_large", "message": "request body exceeds 65536 bytes"}}
    ok = anthropic.Anthropic(base_url=server.url, api_key=server.api_key, max_retries=0).messages.create(
        model=MODEL, max_tokens=2, messages=ASK, cache_control={"type": "ephemeral"})
    assert ok.usage.output_tokens >= 1
