"""Tools in chat completions: calls parsed from Hermes `<tool_call>` blocks (after a `<think>` block too)
and from Harmony, whole and in any pieces; the stream's tool-call deltas and finish_reason; tools and
tool-call history rendered by a real template (Qwen3's, from llama.cpp's set); the live route's checks."""

from __future__ import annotations

import asyncio
import json
import random
import types

import openai
import pytest
from test_reasoning_split import _Hub, pieces

from orcd import testdata
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.server.openai_stream import ChoiceFormat, stream_choices
from orcd.server.prep import chat_messages
from orcd.server.reasoning import ThinkSplitter
from orcd.server.schemas import ChatMessage
from orcd.server.tools import (
    HarmonyTools,
    HermesTools,
    LlamaJsonTools,
    message_fields,
    tool_style,
    with_tools,
)
from orcd.tokenizer import load_tokenizer

MODEL = "tiny-qwen2"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
HERMES = ('<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", '
          '"arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
          '{"city": "Bergen"}}\n</tool_call>')
HARMONY = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
           'to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>')


def calls(msg: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]]


@pytest.mark.parametrize("seed", range(25))
def test_hermes_calls_after_thinking_in_any_pieces(seed):
    whole = message_fields(with_tools(ThinkSplitter, harmony=False)(), HERMES)
    assert whole["reasoning_content"] == "The user wants weather.\n" and whole["content"] == "Let me check.\n"
    assert calls(whole) == [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Bergen"})]
    s, out = HermesTools(ThinkSplitter()), []
    for p in pieces(HERMES, random.Random(seed)):
        out += s.push(p)
    out += s.flush()
    assert [k for k, _ in out if k == "tool_call"] == ["tool_call"] * 2
    assert "".join(t for k, t in out if k == "content") == "Let me check.\n"


def test_hermes_text_that_is_not_a_call_stays_content():
    assert message_fields(HermesTools(), "a <tool_call>{not json}</tool_call> b") == {
        "content": "a <tool_call>{not json}</tool_call> b", "reasoning_content": None}
    assert message_fields(HermesTools(), "cut <tool_call>{\"name\": \"f\"")["content"] == \
        "cut <tool_call>{\"name\": \"f\""
    assert message_fields(HermesTools(), "x <tool_ca") == {"content": "x <tool_ca", "reasoning_content": None}


@pytest.mark.parametrize("seed", range(10))
def test_harmony_calls(seed):
    whole = message_fields(HarmonyTools(), HARMONY)
    assert whole["reasoning_content"] == "Need weather." and whole["content"] is None
    assert calls(whole) == [("get_weather", {"city": "Oslo"})]
    skipped = HARMONY.replace("<|end|>", "").replace("<|call|>", "")  # as decoded: controls skipped
    s, out = HarmonyTools(), []
    for p in pieces(skipped, random.Random(seed)):
        out += s.push(p)
    assert [json.loads(t)["name"] for k, t in out + s.flush() if k == "tool_call"] == ["get_weather"]


def _chat_stream(texts: list[str], split) -> list[dict]:
    """The choices of the chunks stream_choices writes for a job whose events carry `texts`."""
    fmt = ChoiceFormat(chat=True, split=split)
    job = types.SimpleNamespace(finish_reason=None, prompt_ids=[1], tokens_out=len(texts))

    async def run() -> list[bytes]:
        return [b async for b in stream_choices(_Hub(texts), [job], fmt, lambda c: {"choices": c}, False)]

    frames = b"".join(asyncio.run(run())).decode().split("\n\n")
    return [json.loads(f[len("data: "):])["choices"][0] for f in frames if f.startswith("data: {")]


def test_stream_tool_call_deltas_and_finish_reason():
    texts = ["Sure.", "<tool_", 'call>{"name": "get_weather", ', '"arguments": {"ci', 'ty": "Os', 'lo"}}',
             "</tool_call>", ""]
    chunks = _chat_stream(texts, with_tools(None, harmony=False))
    assert "".join(c["delta"].get("content") or "" for c in chunks) == "Sure."
    first, *more = [tc for c in chunks for tc in c["delta"].get("tool_calls", [])]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": '{"ci'}  # as the model wrote it
    assert [m["function"]["arguments"] for m in more] == ['ty": "Os', 'lo"}']
    assert all(m.keys() == {"index", "function"} and m["index"] == 0 for m in more)
    assert chunks[-1]["finish_reason"] == "tool_calls"
    full = ChoiceFormat(chat=True, split=with_tools(None, harmony=False)).full(0, [
        types.SimpleNamespace(text=t, cached_tokens=0) for t in texts], "stop")
    assert full["finish_reason"] == "tool_calls" and full["message"]["content"] == "Sure."
    assert full["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'


@pytest.mark.parametrize("seed", range(25))
def test_streamed_arguments_join_to_the_final_ones(seed):
    """In any pieces: one entry per call with its id and name, then argument pieces whose concatenation is
    the call's arguments in the whole message (the model's text, not re-serialized)."""
    text = HERMES.replace('{"city": "Bergen"}', '{"city": "Bergen", "days": [1, {"a": "}"}]}')
    split = with_tools(ThinkSplitter, harmony=False)
    chunks = _chat_stream([*pieces(text, random.Random(seed)), ""], split)
    joined: dict[int, dict] = {}
    for tc in (tc for c in chunks for tc in c["delta"].get("tool_calls", [])):
        if "id" in tc:
            assert tc["index"] not in joined
            joined[tc["index"]] = {"name": tc["function"]["name"], "arguments": ""}
        joined[tc["index"]]["arguments"] += tc["function"].get("arguments", "")
    whole = message_fields(split(), text)["tool_calls"]
    assert [joined[i] for i in sorted(joined)] == [c["function"] for c in whole]
    assert whole[1]["function"]["arguments"] == '{"city": "Bergen", "days": [1, {"a": "}"}]}'


def test_a_call_cut_while_its_arguments_stream_ends_with_them():
    """max_tokens cut the arguments (here inside the close tag): the call, begun in the stream, carries
    what was written of them."""
    cut = 'Ok <tool_call>\n{"name": "get_weather", "arguments": {"city": "Os'
    msg = message_fields(HermesTools(), cut + "</tool_")
    assert msg["content"] == "Ok " and msg["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Os'}
    chunks = _chat_stream([cut[:30], cut[30:], "</tool_", ""], with_tools(None, harmony=False))
    out = [tc["function"].get("arguments", "") for c in chunks for tc in c["delta"].get("tool_calls", [])]
    assert "".join(out) == '{"city": "Os'


def test_real_template_renders_tools_and_history():
    try:
        data = testdata.fetch()
    except (testdata.TestDataError, OSError) as err:
        pytest.skip(f"llama.cpp templates missing: {err}")
    (path,) = [p for p in data.templates() if p.name == "Qwen-Qwen3-0.6B.jinja"]
    md = synthetic_tokenizer_metadata(400, "qwen2", seed=1)
    md["tokenizer.chat_template"] = path.read_text()
    tok = load_tokenizer(md)
    history = chat_messages([ChatMessage(role="user", content="Weather in Oslo?"), ChatMessage(
        role="assistant", content=None, tool_calls=[{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]),
        ChatMessage(role="tool", tool_call_id="call_1", content="12 C, rain")])
    text = tok.render_chat(history, tools=[WEATHER])
    assert '"name": "get_weather"' in text and "<tools>" in text  # the tool's signature
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<tool_response>\n12 C, rain\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_route_takes_tools_and_history(oai):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"}]
    r = oai.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], max_tokens=8, seed=1)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls") and r.usage.prompt_tokens > 10
    named = {"type": "function", "function": {"name": "nope"}}
    for kw, param in (({"tool_choice": named}, "tool_choice.function.name"),
                      ({"tools": [{"type": "x"}]}, "tools.0"),
                      ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id")):
        with pytest.raises(openai.BadRequestError) as info:
            oai.chat.completions.create(**{"model": MODEL, "messages": history, "tools": [WEATHER],
                                           "max_tokens": 4, **kw})
        assert info.value.body["param"] == param


@pytest.mark.parametrize("seed", range(10))
def test_llama_json_calls(seed):
    one = '{"name": "get_weather", "parameters": {"city": "Oslo; Norway"}}'
    assert calls(message_fields(LlamaJsonTools(), one)) == [("get_weather", {"city": "Oslo; Norway"})]
    two = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}'
    s, out = LlamaJsonTools(), []
    for p in pieces(two, random.Random(seed)):
        out += s.push(p)
    assert [json.loads(t)["name"] for k, t in out + s.flush() if k == "tool_call"] == ["a", "b"]
    assert message_fields(LlamaJsonTools(), "{not a call} ok") == {"content": "{not a call} ok",
                                                                   "reasoning_content": None}
    s = LlamaJsonTools()
    assert s.push("Hello") == [("content", "Hello")]  # plain text streams at once


@pytest.mark.parametrize("seed", range(15))
def test_llama_json_arguments_stream_and_join(seed):
    """Llama 3.x JSON calls (two joined by `;`, a `;` and braces in a string) stream their arguments;
    the pieces join to the whole message's arguments; text after the calls is content."""
    text = ('  {"name": "get_weather", "parameters": {"city": "Oslo; {N}"}} ; '
            '{"name": "get_time", "parameters": {"zone": "UTC"}} Done.')
    split = with_tools(None, harmony=False, style="llama")
    chunks = _chat_stream([*pieces(text, random.Random(seed)), ""], split)
    joined: dict[int, dict] = {}
    for tc in (tc for c in chunks for tc in c["delta"].get("tool_calls", [])):
        if "id" in tc:
            joined[tc["index"]] = {"name": tc["function"]["name"], "arguments": ""}
        joined[tc["index"]]["arguments"] += tc["function"].get("arguments", "")
    whole = message_fields(split(), text)
    assert [joined[i] for i in sorted(joined)] == [c["function"] for c in whole["tool_calls"]]
    assert calls(whole) == [("get_weather", {"city": "Oslo; {N}"}), ("get_time", {"zone": "UTC"})]
    assert whole["content"] == "Done." == "".join(c["delta"].get("content") or "" for c in chunks)
    by_char = [tc for c in _chat_stream([*text, ""], split) for tc in c["delta"].get("tool_calls", [])]
    # a delta a character: the first (the call's entry) carries the `{` that completed its head
    assert len(by_char) == len('{"city": "Oslo; {N}"}') + len('{"zone": "UTC"}')
    cut = message_fields(split(), '{"name": "get_time", "parameters": {"zone": "U')
    assert cut["tool_calls"][0]["function"] == {"name": "get_time", "arguments": '{"zone": "U'}
    assert message_fields(split(), ' {"answer": 1}')["content"] == ' {"answer": 1}'  # no call: as written


def test_tool_style_of_real_templates():
    try:
        data = testdata.fetch()
    except (testdata.TestDataError, OSError) as err:
        pytest.skip(f"llama.cpp templates missing: {err}")
    style = {p.name: tool_style(p.read_text()) for p in data.templates()}
    for name in ("meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.3-70B-Instruct"):
        assert style[name + ".jinja"] == "llama"
    for name in ("Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
                 ):
        assert style[name + ".jinja"] == "hermes"
