"""Mistral ([TOOL_CALLS]) and Qwen3-Coder (<function=..> XML) tool calls: parsed whole and from text cut
at every position; the format picked from llama.cpp's real templates; calls the real templates render
for a history parse back to the same calls; Mistral's markers survive decoding."""

from __future__ import annotations

import asyncio
import json
import types

import pytest
from test_reasoning_split import _Hub

from orcd import testdata
from orcd.errors import TemplateError
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.server.openai_stream import ChoiceFormat, stream_choices
from orcd.server.prep import encode_chat
from orcd.server.reasoning import ThinkSplitter
from orcd.server.tools import (
    HermesTools,
    MistralTools,
    ToolDeltas,
    message_fields,
    openai_calls,
    template_call_ids,
    tool_style,
    with_tools,
)
from orcd.tokenizer import load_tokenizer

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "metric": {"type": "boolean"}, "where": {"type": "object"},
                                     "zip": {"type": "string"}}}}}
NEMO = ('Checking.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo [N]"}, "id": "abc123XYZ"},'
        ' {"name": "get_time", "arguments": {}}]')
SMALL = ('[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Oslo", "note": "a } in a string"}'
         '[TOOL_CALLS]get_time[ARGS]{}')
MINISTRAL = 'I will look.[TOOL_CALLS]get_weather[ARGS]{"city": "Bergen"}get_time[ARGS]{"tz": "UTC"}'
CODER = ('<think>\nneeds a tool\n</think>\n\nOne moment.\n<tool_call>\n<function=get_weather>\n'
         '<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n'
         '<parameter=metric>\nTrue\n</parameter>\n'
         '<parameter=where>\n{"lat": 1.5}\n</parameter>\n<parameter=zip>\n01234\n</parameter>\n</function>\n'
         '</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>')


def calls(pairs: list[tuple[str, str]]) -> list[tuple[str, dict]]:
    return [(c["name"], json.loads(c["arguments"])) for c in map(json.loads, (t for k, t in pairs
                                                                               if k == "tool_call"))]


def text_of(pairs: list[tuple[str, str]], kind: str = "content") -> str:
    return "".join(t for k, t in pairs if k == kind)


def run(make, parts: list[str]) -> list[tuple[str, str]]:
    s, out = make(), []
    for p in parts:
        out += s.push(p)
    return out + s.flush()


def every_split(make, text: str) -> list[list[tuple[str, str]]]:
    """The pairs for the text whole, one character at a time, and cut once at every position."""
    return [run(make, [text]), run(make, list(text))] + [run(make, [text[:i], text[i:]])
                                                          for i in range(1, len(text))]


@pytest.mark.parametrize("text, content, want", [
    (NEMO, "Checking.", [("get_weather", {"city": "Oslo [N]"}), ("get_time", {})]),
    (SMALL, "", [("get_weather", {"city": "Oslo", "note": "a } in a string"}), ("get_time", {})]),
    (MINISTRAL, "I will look.", [("get_weather", {"city": "Bergen"}), ("get_time", {"tz": "UTC"})]),
])
def test_mistral_calls_cut_anywhere(text, content, want):
    for pairs in every_split(MistralTools, text):
        assert calls(pairs) == want and text_of(pairs) == content
        assert joined_arguments(pairs) == ([] if text == NEMO else [c for k, c in pairs if k == "tool_call"])


def joined_arguments(pairs: list[tuple[str, str]]) -> list[str]:
    """The streamed calls' TOOL_CALL payloads rebuilt from their CALL_BEGIN name and CALL_ARGS pieces."""
    out, name, args = [], None, ""
    for kind, text in pairs:
        if kind == "tool_call_begin":
            name, args = text, ""
        elif kind == "tool_call_args":
            args += text
        elif kind == "tool_call" and name is not None:
            out.append(json.dumps({"name": name, "arguments": args}))
            name = None
    return out


def test_mistral_stream_returns_each_call_when_it_closes():
    s = MistralTools()
    assert s.push("Hi [TOOL_") == [("content", "Hi ")]
    assert s.push('CALLS]get_weather[ARGS]{"city": "Oslo"') == [("tool_call_begin", "get_weather"),
                                                                ("tool_call_args", '{"city": "Oslo"')]
    end = s.push("}")
    assert end[0] == ("tool_call_args", "}") and calls(end) == [("get_weather", {"city": "Oslo"})]
    assert calls(s.push("[TOOL_CALLS]f[ARGS]{}  ") + s.flush()) == [("f", {})]


@pytest.mark.parametrize("text", [
    "no calls at all [TOOL", "[TOOL_CALLS] not a call", '[TOOL_CALLS][{"name": 1}]',
    "[TOOL_CALLS]f[ARGS]oops",
    '[TOOL_CALLS]bad name[ARGS]{}', "[TOOL_CALLS]",
])
def test_mistral_text_that_is_no_call_stays_content(text):
    for pairs in every_split(MistralTools, text):
        assert calls(pairs) == [] and text_of(pairs) == text


def test_mistral_call_cut_in_its_arguments_keeps_them():
    """A `NAME[ARGS]{` call streams its arguments: cut by the end of the text, it ends with them."""
    for pairs in every_split(MistralTools, '[TOOL_CALLS]f[ARGS]{"cut": '):
        (payload,) = [json.loads(t) for k, t in pairs if k == "tool_call"]
        streamed = "".join(t for k, t in pairs if k == "tool_call_args")
        assert payload == {"name": "f", "arguments": '{"cut": '} and streamed == '{"cut": '
        assert text_of(pairs) == ""


def test_mistral_text_after_calls():
    pairs = run(MistralTools, ['[TOOL_CALLS]f[ARGS]{"a": [1, {"b": "]"}]}\n\nDone, [x]'])
    assert calls(pairs) == [("f", {"a": [1, {"b": "]"}]})] and text_of(pairs) == "\n\nDone, [x]"


def test_coder_calls_typed_by_schema_cut_anywhere():
    make = with_tools(ThinkSplitter, harmony=False, style="coder", tools=[WEATHER])
    want = [("get_weather", {"city": "New York", "days": 3, "metric": True, "where": {"lat": 1.5},
                             "zip": "01234"}), ("get_time", {})]
    for pairs in every_split(make, CODER):
        assert calls(pairs) == want
        assert text_of(pairs) == "One moment.\n" and text_of(pairs, "reasoning_content") == "needs a tool\n"


def test_coder_without_schema_and_bad_blocks():
    make = with_tools(None, harmony=False, style="coder")
    pairs = run(make, ["<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n<parameter=o>\n[1, 2]\n"
                       "</parameter>\n<parameter=s>\n line one\nline two \n</parameter>\n</function>\n"
                       "</tool_call>"])
    assert calls(pairs) == [("f", {"n": "7", "o": [1, 2], "s": " line one\nline two "})]
    bad = "a <tool_call>\n{\"name\": \"f\"}\n</tool_call> b"  # Hermes JSON is not this format's call
    assert run(make, [bad]) == [("content", "a "), ("content", bad[2:-2]), ("content", " b")]
    typed = with_tools(None, harmony=False, style="coder", tools=[WEATHER])
    odd = "<tool_call><function=get_weather><parameter=days>many</parameter></function></tool_call>"
    assert calls(run(typed, [odd])) == [("get_weather", {"days": "many"})]  # unconvertible: the text


def test_message_fields_and_openai_calls():
    msg = message_fields(MistralTools(), SMALL)
    assert msg["content"] is None and [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather",
                                                                                          "get_time"]
    (entry,) = openai_calls([json.dumps({"name": "f", "arguments": "{}"})])
    assert entry["id"].startswith("call_") and entry["function"] == {"name": "f", "arguments": "{}"}
    deltas = ToolDeltas()
    deltas.count = 2  # two calls streamed before: a whole call is index 2
    (entry,) = deltas.entries([("tool_call", json.dumps({"name": "f", "arguments": "{}"}))])
    assert entry["index"] == 2 and entry["id"].startswith("call_") and deltas.count == 3


def _templates() -> dict[str, str]:
    try:
        data = testdata.fetch()
    except (testdata.TestDataError, OSError) as err:
        pytest.skip(f"llama.cpp templates missing: {err}")
    return {p.name.removesuffix(".jinja"): p.read_text() for p in data.templates()}


def test_tool_style_of_real_templates():
    style = {name: tool_style(t) for name, t in _templates().items()}
    for name in ("Qwen3-Coder", "Qwen3.5-4B", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "StepFun3.5-Flash"):
        assert style[name] == "coder", name
    for name in ("mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
                 "unsloth-mistral-Devstral-Small-2507", "mistralai-Ministral-3-14B-Reasoning-2512"):
        assert style[name] == "mistral", name
    for name in ("Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B",
                 "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"):
        assert style[name] == "hermes", name
    assert style["meta-llama-Llama-3.1-8B-Instruct"] == "llama"


@pytest.mark.parametrize("name", ["Qwen3-Coder", "Qwen3.5-4B", "mistralai-Mistral-Nemo-Instruct-2407",
                                  "Mistral-Small-3.2-24B-Instruct-2506",
                                  "unsloth-mistral-Devstral-Small-2507",
                                  "mistralai-Ministral-3-14B-Reasoning-2512"])
def test_calls_rendered_by_the_real_template_parse_back(name):
    """The assistant turn the template renders for a tool-call history is what the model was taught to
    write: scanned with the style the template picks, it gives back the same calls."""
    md = synthetic_tokenizer_metadata(400, "qwen2", seed=1)
    md["tokenizer.chat_template"] = template = _templates()[name]
    tok = load_tokenizer(md)
    args = [{"city": "Oslo", "days": 2}, {"zip": "0150"}]
    tool_calls = [{"id": f"call{i}abcd", "type": "function",
                   "function": {"name": "get_weather", "arguments": a}} for i, a in enumerate(args)]
    user = [{"role": "user", "content": "Weather?"}]
    head = tok.render_chat(user, add_generation_prompt=True, tools=[WEATHER])
    full = tok.render_chat([*user, {"role": "assistant", "content": "", "tool_calls": tool_calls}],
                           add_generation_prompt=False, tools=[WEATHER])
    common = next(i for i, (a, b) in enumerate(zip(head + "\0", full, strict=False)) if a != b)
    written = full[common:]
    for end in ("<|im_end|>", "</s>"):
        written = written.split(end)[0]
    opened = head.rstrip().endswith("<think>")  # Qwen3.5 opens the model's reasoning block
    split = (lambda: ThinkSplitter(in_reasoning=opened)) if "<think>" in template else None
    pairs = run(with_tools(split, harmony=False, style=tool_style(template), tools=[WEATHER]), [written])
    assert calls(pairs) == [("get_weather", a) for a in args], written
    assert not text_of(pairs).strip(), written


def test_mistral_markers_survive_decoding():
    md = synthetic_tokenizer_metadata(400, "qwen2", seed=1)
    extra = ["[INST]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]
    md["tokenizer.ggml.tokens"] = md["tokenizer.ggml.tokens"] + extra
    md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"] + [3] * len(extra)  # CONTROL
    tok = load_tokenizer(md)
    ids = [tok.vocab.tokens.index(t) for t in extra]
    assert tok.decode(ids, skip_special=True) == "[TOOL_CALLS][ARGS][CALL_ID]"  # [INST] stays hidden


def test_hermes_unchanged_by_the_split():
    assert calls(run(HermesTools, ['<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'])) == [
        ("f", {"x": 1})]


@pytest.mark.parametrize("style, texts", [
    ("mistral", ["Sure.", "[TOOL_CALLS]", "get_weather", "[ARGS]", '{"city": ', '"Oslo"}', ""]),
    ("coder", ["Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOs", "lo\n</parameter>\n",
               "</function>\n</tool_call>", ""]),
])
def test_chat_stream_tool_call_deltas(style, texts):
    fmt = ChoiceFormat(chat=True, split=with_tools(None, harmony=False, style=style, tools=[WEATHER]))
    job = types.SimpleNamespace(finish_reason=None, prompt_ids=[1], tokens_out=len(texts))

    async def go() -> list[bytes]:
        return [b async for b in stream_choices(_Hub(texts), [job], fmt, lambda c: {"choices": c}, False)]

    frames = b"".join(asyncio.run(go())).decode().split("\n\n")
    chunks = [json.loads(f[len("data: "):])["choices"][0] for f in frames if f.startswith("data: {")]
    assert "".join(c["delta"].get("content") or "" for c in chunks).strip() == "Sure."
    first, *more = [tc for c in chunks for tc in c["delta"].get("tool_calls", [])]
    assert first["index"] == 0 and all(m["index"] == 0 and "id" not in m for m in more)
    assert len(more) == (1 if style == "mistral" else 0)  # mistral: its arguments in the pieces written
    arguments = first["function"]["arguments"] + "".join(m["function"]["arguments"] for m in more)
    assert (first["function"]["name"], arguments) == ("get_weather", '{"city": "Oslo"}')
    assert chunks[-1]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("name", ["mistralai-Mistral-Nemo-Instruct-2407",
                                  "Mistral-Small-3.2-24B-Instruct-2506"])
def test_mistral_templates_get_nine_character_call_ids(name):
    """These templates raise on ids that are not 9 alphanumerics; OpenAI's `call_…` ids are mapped."""
    md = synthetic_tokenizer_metadata(400, "qwen2", seed=1)
    md["tokenizer.chat_template"] = _templates()[name]
    tok = load_tokenizer(md)
    call = {"id": "call_0123456789abcdef", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "12 C"}]
    with pytest.raises(TemplateError):
        tok.render_chat(history, tools=[WEATHER])
    ids = asyncio.run(encode_chat(tok, history, 32768, tools=[WEATHER]))
    text = tok.decode(ids)
    short = template_call_ids(history, md["tokenizer.chat_template"])[1]["tool_calls"][0]["id"]
    assert len(short) == 9 and text.count(short) == 2 and "call_0123" not in text


def test_a_whole_call_without_its_close_tag_is_a_call():
    coder = with_tools(None, harmony=False, style="coder", tools=[WEATHER])
    for text in ("<tool_call>\n<function=get_time>\n</function>\n", '<tool_call>{"name": "get_time"}'):
        for pairs in every_split(coder if "<function" in text else HermesTools, text):
            assert calls(pairs) == [("get_time", {})] and text_of(pairs) == ""
    cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs"  # cut by max_tokens: text
    assert run(coder, [cut]) == [("content", cut)]
