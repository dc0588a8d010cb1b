"""OpenAI Responses API (/v1/responses) against the real `orcd serve` of these tests, with the official
`openai` client: the same tokens as the chat route for the same conversation, the stream's events in the
SDK's order with gapless sequence numbers, a forced function call (through the grammar) and the next turn
with its output, text.format json_schema, disconnects cancelling, and 400s naming the field. A scripted
stream (reasoning, text, two calls) goes through the SDK's own stream parser."""

from __future__ import annotations

import asyncio
import json
import types

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from server_helpers import LONG, metric, sse_blocks
from test_fuzz_requests import EXAMPLES, JSON, TEXT
from test_reasoning_split import _Hub

from orcd.server.reasoning import ThinkSplitter
from orcd.server.responses_format import input_messages
from orcd.server.responses_routes import _stream
from orcd.server.responses_stream import EventWriter, OutputBuilder
from orcd.server.tools import with_tools

MODEL = "tiny-qwen2"
RUNS_LONG = 1  # with this seed the tiny model writes 518 tokens before its EOS (most seeds: 4-140), so a
# cancel or disconnect right after the first event always lands while it runs
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                          "required": ["city"], "additionalProperties": False}}


@pytest.fixture()
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0, timeout=120)


def test_response_equals_chat(oai):
    r = oai.responses.create(model=MODEL, instructions="You are terse.", input="Write a haiku about rain.",
                             max_output_tokens=12, temperature=0)
    chat = oai.chat.completions.create(model=MODEL, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Write a haiku about rain."}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL
    assert [o.type for o in r.output] == ["message"] and r.output[0].content[0].type == "output_text"
    assert r.output_text == chat.choices[0].message.content
    assert (r.usage.input_tokens, r.usage.output_tokens) == (chat.usage.prompt_tokens, 12)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.instructions == "You are terse." and r.store is False


def test_stream_events_in_order(oai, server):
    kw = dict(model=MODEL, input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi there"}]}],
              max_output_tokens=10, temperature=0)
    with oai.responses.stream(**kw) as stream:
        sdk = [e.type for e in stream]
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c, \
            c.stream("POST", "/v1/responses", json={**kw, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [(e, json.loads(d)) for e, d in sse_blocks(r) if e != "comment"]
    names = [e for e, _ in events]
    assert names == sdk and all(e == d["type"] for e, d in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert set(names[4:-4]) == {"response.output_text.delta"}
    assert names[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    final = events[-1][1]["response"]
    streamed = "".join(d["delta"] for e, d in events if e == "response.output_text.delta")
    assert streamed == final["output"][0]["content"][0]["text"] == oai.responses.create(**kw).output_text
    assert final["usage"]["output_tokens"] == 10 and final["status"] == "incomplete"


def test_forced_call_then_its_result(oai):
    first = [{"role": "user", "content": "Weather in Oslo?"}]
    r = oai.responses.create(model=MODEL, input=first, tools=[WEATHER], tool_choice="required",
                             max_output_tokens=120, temperature=0)
    (call,) = r.output
    assert r.status == "completed" and call.type == "function_call" and call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"} and call.call_id.startswith("call_")
    with oai.responses.stream(model=MODEL, input=first, tools=[WEATHER], max_output_tokens=120,
                              tool_choice={"type": "function", "name": "get_weather"}, temperature=0) as s:
        events = list(s)
        final = s.get_final_response()
    assert final.output[0].parsed_arguments == json.loads(call.arguments)  # the SDK parsed the strict call
    names, deltas = [e.type for e in events], [e.delta for e in events if e.type.endswith("arguments.delta")]
    assert names[2:] == ["response.output_item.added",
                         *["response.function_call_arguments.delta"] * len(deltas),
                         "response.function_call_arguments.done", "response.output_item.done",
                         "response.completed"]
    assert len(deltas) > 2 and "".join(deltas) == final.output[0].arguments  # streamed as written
    # the next turn: the call and its output go back as input items, rendered as the chat route does
    turn = [*first, *[o.model_dump(exclude_none=True) for o in r.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": "12 C, rain"}]
    nxt = oai.responses.create(model=MODEL, input=turn, tools=[WEATHER], max_output_tokens=4, temperature=0)
    fn = {"name": call.name, "arguments": call.arguments}
    chat = oai.chat.completions.create(model=MODEL, max_tokens=4, temperature=0, tools=[
        {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}], messages=[
        *first, {"role": "assistant", "content": None,
                 "tool_calls": [{"id": call.call_id, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "12 C, rain"}])
    assert nxt.usage.input_tokens == chat.usage.prompt_tokens
    assert nxt.output_text == chat.choices[0].message.content


def test_text_format_json_schema(oai):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "yes_no", "schema": schema, "strict": True}
    r = oai.responses.create(model=MODEL, input="Yes?", max_output_tokens=60, temperature=0,
                             text={"format": fmt})
    assert r.status == "completed" and isinstance(json.loads(r.output_text)["ok"], bool)
    assert r.text.format.type == "json_schema"

    class YesNo(BaseModel):
        ok: bool

    parsed = oai.responses.parse(model=MODEL, input="Yes?", max_output_tokens=60, text_format=YesNo)
    assert isinstance(parsed.output_parsed, YesNo)  # the SDK's parse helper sends its own strict schema


def test_disconnect_cancels(server):
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
        before = c.get("/metrics").text
        body = {"model": MODEL, "input": "Hi", "max_output_tokens": LONG, "stream": True, "seed": RUNS_LONG}
        with c.stream("POST", "/v1/responses", json=body) as r:
            it = sse_blocks(r)
            assert [next(it)[0] for _ in range(4)][-1] == "response.content_part.added"
        for _ in range(200):
            if c.get("/health").json()["active_requests"] == 0:
                break
            asyncio.run(asyncio.sleep(0.05))
        after = c.get("/metrics").text
    sample = 'orcd_requests_total{outcome="disconnected",route="responses"}'
    assert metric(after, sample) == metric(before, sample) + 1


@pytest.mark.parametrize("change, field", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.content.0.type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}}, "text.format.schema"),
    ({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}, "include.1"),
    ({"reasoning": {"effort": "low", "budget": 3}}, "reasoning.budget"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"input": [{"type": "reasoning", "id": "r", "summary": [], "content": "hm"}, {"role": "user",
                                                                                    "content": "Hi"}]},
     "input.0.content"),
    ({"reasoning": {"effort": 3}}, "reasoning.effort"),
    ({"max_output_tokens": 10 ** 6}, "max_output_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"max_output_tokens": "5"}, "max_output_tokens"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_errors_name_the_field(server, change, field):
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4, **change}
    r = httpx.post(server.url + "/v1/responses", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and (field in err["message"] or err["code"] == "context_length_exceeded")


def test_scripted_stream_parses_in_the_sdk():
    """Reasoning, text and two Hermes calls, cut at odd places, through the route's own stream, then
    through the official SDK's stream parser (which checks item order and identities)."""
    texts = ["<think>\nwhich", " city?</th", "ink>\n\nChecking.", "<tool_call>\n{\"name\": \"get_weather\", ",
             '"arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_',
             'call>{"name": "get_weather", "arguments": ', '{"city": "Rome"}}</tool_call>', ""]
    job = types.SimpleNamespace(finish_reason=None, prompt_ids=[1, 2], tokens_out=len(texts))
    writer, out = EventWriter(), []
    builder = OutputBuilder(with_tools(ThinkSplitter, harmony=False), True,
                            lambda name, data: out.append(writer.frame(name, data)))
    head = {"id": "resp_x", "object": "response", "created_at": 1, "model": MODEL, "tools": [WEATHER],
            "parallel_tool_calls": True, "tool_choice": "auto", "output": []}

    async def run() -> bytes:
        return b"".join([b async for b in _stream(_Hub(texts), job, head, builder, writer, out)])

    body = asyncio.run(run())
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, content=body, headers={"content-type": "text/event-stream"}))
    client = openai.OpenAI(base_url="http://orcd.test/v1", api_key="x",
                           http_client=httpx.Client(transport=transport))
    with client.responses.stream(model=MODEL, input="x", tools=[WEATHER]) as s:
        names = [e.type for e in s]
        final = s.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output[0].content[0].text == "which city?" and final.output_text == "Checking."
    assert [o.parsed_arguments for o in final.output[2:]] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert names.count("response.reasoning_text.delta") == 2 and names[-1] == "response.completed"
    assert final.usage.output_tokens_details.reasoning_tokens == 2


KEYS = ["type", "role", "content", "call_id", "name", "arguments", "output", "id", "status", "summary",
        "text"]
ITEM = st.dictionaries(st.sampled_from(KEYS), JSON | st.sampled_from(
    ["message", "function_call", "function_call_output", "reasoning", "user", "assistant", "developer",
     "input_text", "{}"]), max_size=5)
PART = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "input_image"]),
                              "text": TEXT | JSON})
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                 "content": st.lists(PART, max_size=2)})
FIELDS = {"input": st.lists(ITEM | MESSAGE, max_size=3),
          "tools": st.lists(st.fixed_dictionaries({"type": st.sampled_from(["function", "web_search"]),
                                                   "name": TEXT, "parameters": JSON}), max_size=2),
          "tool_choice": st.sampled_from(["auto", "none", "required", "x"]) | JSON,
          "text": st.fixed_dictionaries({"format": st.fixed_dictionaries({"type": st.sampled_from(
              ["text", "json_object", "json_schema", "x"]), "schema": JSON, "name": TEXT})}) | JSON}
OTHER = ["instructions", "parallel_tool_calls", "temperature", "top_p", "seed", "store", "reasoning",
         "include", "truncation", "metadata", "previous_response_id", "stream_options", "top_logprobs",
         "frobnicate"]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_bodies_never_fail_the_server(server, data):
    limit = data.draw(st.sampled_from([2, 0, "2", -1]))  # never unset: that is up to the context
    body = {"model": MODEL, "input": "fuzz", "max_output_tokens": limit}
    for name in data.draw(st.lists(st.sampled_from([*FIELDS, *OTHER]), max_size=4, unique=True)):
        body[name] = data.draw(FIELDS.get(name, JSON))
    r = httpx.post(server.url + "/v1/responses", content=json.dumps(body).encode(), timeout=60,
                   headers={**server.headers, "content-type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    assert r.status_code == 200 or r.json()["error"]["message"]


def test_cancel_by_id_and_no_stored_responses(server):
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
        body = {"model": MODEL, "input": "Hi", "max_output_tokens": LONG, "stream": True, "seed": RUNS_LONG}
        with c.stream("POST", "/v1/responses", json=body) as r:
            it = ((e, json.loads(d)) for e, d in sse_blocks(r) if e != "comment")
            rid = next(it)[1]["response"]["id"]
            assert c.post("/v1/cancel", json={"request_id": rid}).json()["cancelled"] is True
            name, last = list(it)[-1]
        assert name == "response.failed" and last["response"]["status"] == "failed"
        assert "cancelled" in last["response"]["error"]["message"] and last["response"]["id"] == rid
        for method, path in (("GET", rid), ("DELETE", rid), ("GET", rid + "/input_items")):
            r = c.request(method, "/v1/responses/" + path)
            assert r.status_code == 404 and "stateless" in r.json()["error"]["message"]


def test_codex_shaped_request_streams(server):
    """The fields Codex sends on every turn (reasoning, include, store, prompt_cache_key, text.verbosity,
    parallel_tool_calls, developer messages, non-strict function tools) are taken."""
    shell = {"type": "function", "name": "shell", "description": "Runs a command", "strict": False,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {
                 "type": "string"}}}, "required": ["command"]}}
    def said(role: str, text: str) -> dict:
        return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}

    body = {"model": MODEL, "instructions": "You are a coding agent.", "tools": [shell],
            "tool_choice": "auto", "parallel_tool_calls": False, "store": False, "stream": True,
            "reasoning": {"effort": "medium", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "thread-1", "text": {"verbosity": "low"}, "max_output_tokens": 6,
            "input": [said("developer", "cwd=/"), said("user", "ls")]}
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c, \
            c.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200
        blocks = [(e, d) for e, d in sse_blocks(r) if e != "comment"]
    (first, _), (last, data) = blocks[0], blocks[-1]
    final = json.loads(data)["response"]
    # sampled (no seed): six tokens cut it, or the model ended sooner (an EOS, a whole tool call)
    assert first == "response.created" and last in ("response.incomplete", "response.completed")
    assert final["usage"]["output_tokens"] <= 6
    if last == "response.incomplete":
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert final["status"] == "completed"


def test_input_items_as_template_messages():
    items = [{"role": "developer", "content": "be brief"}, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "in Oslo?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.",
                                                              "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "12 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "?"}]}]
    assert input_messages("sys", items) == [
        {"role": "system", "content": "sys"}, {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "hm", "thinking": "hm",
         "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "12 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "?"}]
    assert input_messages(None, "Hi") == [{"role": "user", "content": "Hi"}]
    dropped = [{"type": "reasoning", "id": "rs_2", "summary": []},  # no content, then no assistant turn
               {"type": "reasoning", "id": "rs_3", "summary": [], "content": [
                   {"type": "reasoning_text", "text": "x"}]}, {"role": "user", "content": "Hi"}]
    assert input_messages(None, dropped) == [{"role": "user", "content": "Hi"}]
