"""Forced calls in Qwen3-Coder's XML and gpt-oss Harmony: the call text a model would write walks its
grammar token by token to the end, random walks of the grammar's masks parse back through orcd's own
parsers (orcd.server.tools) into calls whose arguments validate, and schemas that cannot be forced in
raw text are 400s naming the parameter."""

from __future__ import annotations

import json

import pytest
import torch

from orcd.errors import RequestError
from orcd.server.tools import message_fields, with_tools
from orcd.structured.mask import unpack_bitmask
from orcd.structured.tool_grammar import forced_tool_grammar

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 10},
        "unit": {"enum": ["C", "F"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "hourly": {"type": "boolean"},
        "note": {"description": "free text", "maxLength": 6},
        "where": {"type": "object", "properties": {"lat": {"type": "number", "enum": [0.5, -23.5]}},
                  "required": ["lat"], "additionalProperties": False},
        "code": {"type": ["string", "null"], "pattern": "^[A-Z]{2}$"}},
    "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": False}}}  # else a random walk may add properties without end
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def qwen2_backend():
    from orcd import testdata
    from orcd.gguf.reader import open_gguf
    from orcd.structured.backend import GrammarBackend
    from orcd.tokenizer import load_tokenizer

    return GrammarBackend(load_tokenizer(open_gguf(testdata.fetch().vocab_path("qwen2")).metadata))


@pytest.fixture(scope="module")
def harmony_backend():
    from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
    from orcd.structured.backend import GrammarBackend
    from orcd.tokenizer import load_tokenizer

    return GrammarBackend(load_tokenizer(synthetic_tokenizer_metadata(600, "gpt-oss", seed=1)))


def walk(backend, grammar: str, ids: list[int]) -> None:
    """Every token is allowed by the mask before it; the grammar is complete after the last."""
    m = backend.matcher(grammar)
    for t in ids:
        assert unpack_bitmask(backend.fill([m]), backend.vocab_size)[0, t], backend.tokenizer.decode([t])
        m.consume(t)
    assert m.m.is_accepting()


def random_walk(backend, grammar: str, gen: torch.Generator, head: list[int] = (), limit: int = 400) -> str:
    """A completion sampled uniformly from each mask (after the forced `head` tokens) until an end token:
    its text past `head`."""
    m, out = backend.matcher(grammar), []
    for t in head:
        m.consume(t)
    for _ in range(limit):
        allowed = unpack_bitmask(backend.fill([m]), backend.vocab_size)[0].nonzero().flatten()
        t = int(allowed[torch.randint(len(allowed), (1,), generator=gen)])
        if t in backend.eos_ids:
            assert m.m.is_accepting()
            return backend.tokenizer.decode(out)
        m.consume(t)
        out.append(t)
    raise AssertionError(f"no end after {limit} tokens: {backend.tokenizer.decode(out)!r}")


def parsed(style: str, text: str) -> list[tuple[str, dict]]:
    msg = message_fields(with_tools(None, False, style, TOOLS)(), text)
    assert msg["content"] is None, text
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]]


CODER_TEXT = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
              "<parameter=days>\n3\n</parameter>\n<parameter=note>\na <b>\n</parameter>\n"
              "<parameter=where>\n{\"lat\":-23.5}\n</parameter>\n</function>\n</tool_call>")


def test_coder_call_walks_its_grammar_and_parses_back(qwen2_backend):
    grammar = forced_tool_grammar(TOOLS, "required", "coder")
    walk(qwen2_backend, grammar, qwen2_backend.tokenizer.encode(CODER_TEXT))
    assert parsed("coder", CODER_TEXT) == [("get_weather", {"city": "São Paulo", "days": 3, "note": "a <b>",
                                                            "where": {"lat": -23.5}})]


@pytest.mark.parametrize("text", [
    CODER_TEXT.replace("\n3\n", "\n15\n"),  # above the maximum
    CODER_TEXT.replace("<parameter=city>\nSão Paulo\n</parameter>\n", ""),  # a required one missing
    CODER_TEXT.replace("a <b>", "</parameter>"),
    CODER_TEXT.replace("get_weather", "get_time"),
])
def test_coder_grammar_refuses_what_would_not_validate(qwen2_backend, text):
    with pytest.raises(AssertionError):
        walk(qwen2_backend, forced_tool_grammar(TOOLS, "required", "coder"),
             qwen2_backend.tokenizer.encode(text))


def test_coder_random_calls_parse_back_and_validate(qwen2_backend):
    gen = torch.Generator().manual_seed(0)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for k in range(8):
        grammar = forced_tool_grammar(TOOLS, "required" if k % 2 else named, "coder")
        text = random_walk(qwen2_backend, grammar, gen)
        ((name, args),) = parsed("coder", text)
        assert k % 2 or name == "get_weather"
        jsonschema.validate(args, SCHEMAS[name])


HARMONY_CALL = '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone":"CET"}'


@pytest.mark.parametrize("thought", ["", "<|channel|>analysis<|message|>The user wants\nthe time.<|end|>"
                                         "<|start|>assistant"])
def test_harmony_call_walks_its_grammar_and_parses_back(harmony_backend, thought):
    tok = harmony_backend.tokenizer
    grammar = forced_tool_grammar(TOOLS, {"type": "function", "function": {"name": "get_time"}}, "harmony")
    ids = tok.encode(thought + HARMONY_CALL, parse_special=True)
    walk(harmony_backend, grammar, ids)
    call_id = tok.vocab.index["<|call|>"]
    assert call_id in harmony_backend.eos_ids  # after the arguments the model ends with <|call|>
    for skip in (False, True):
        msg = message_fields(with_tools(None, False, "harmony", TOOLS)(),
                             tok.decode(ids + [call_id], skip_special=skip))
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] \
            == [("get_time", {"zone": "CET"})]
        assert msg["reasoning_content"] == ("The user wants\nthe time." if thought else None)
    with pytest.raises(AssertionError):  # the named choice: no other function
        walk(harmony_backend, grammar, tok.encode(HARMONY_CALL.replace("get_time", "get_weather")))


def test_harmony_random_calls_parse_back_and_validate(harmony_backend):
    gen = torch.Generator().manual_seed(1)
    tools = json.loads(json.dumps(TOOLS))  # untyped "note" would be any JSON value: walks may not end
    tools[0]["function"]["parameters"]["properties"]["note"]["type"] = "string"
    grammar = forced_tool_grammar(tools, "required", "harmony")
    head = harmony_backend.tokenizer.encode("<|channel|>commentary")  # past the optional analysis
    for _ in range(6):
        text = "<|channel|>commentary" + random_walk(harmony_backend, grammar, gen, head)
        msg = message_fields(with_tools(None, False, "harmony", TOOLS)(), text)
        (call,) = msg["tool_calls"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])


@pytest.mark.parametrize("schema, param", [
    ({"pattern": "[a-z]+", "type": "string"}, "tools.0.function.parameters.properties.p"),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "tools.0.function.parameters.properties.p"),
    ({"type": "string", "enum": ["x</parameter>"]}, "tools.0.function.parameters.properties.p"),
])
def test_coder_refuses_what_raw_text_cannot_force(schema, param):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"p": schema}, "required": ["p"]}}}
    with pytest.raises(RequestError) as err:
        forced_tool_grammar([tool], "required", "coder")
    assert err.value.param == param


@pytest.mark.parametrize("style", ["hermes", "mistral", "coder"])
def test_parallel_calls_walk_and_parse_back_only_when_asked(qwen2_backend, style):
    """parallel=True: one or more calls (hermes / coder blocks on their own lines, mistral one list);
    without it the second call is refused."""
    time = {"hermes": '<tool_call>\n{"name":"get_time","arguments":{"zone":"UTC"}}\n</tool_call>',
            "mistral": '{"name":"get_time","arguments":{"zone":"UTC"}}',
            "coder": "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n"
                     "</tool_call>"}[style]
    one, two = (f"[TOOL_CALLS][{time}]", f"[TOOL_CALLS][{time}, {time}]") if style == "mistral" else \
        (time, time + "\n" + time)
    encode = qwen2_backend.tokenizer.encode
    walk(qwen2_backend, forced_tool_grammar(TOOLS, "required", style, parallel=True), encode(one))
    walk(qwen2_backend, forced_tool_grammar(TOOLS, "required", style, parallel=True), encode(two))
    assert parsed(style, two) == [("get_time", {"zone": "UTC"})] * 2
    with pytest.raises(AssertionError):
        walk(qwen2_backend, forced_tool_grammar(TOOLS, "required", style), encode(two))


@pytest.mark.parametrize("schema, closing_tag_ok", [
    ({"type": "string"}, True),
    ({"type": "string", "maxLength": 64}, True),
    ({"type": "string", "maxLength": 10000}, False),  # long bounds: no `</` (the lexer's limit)
    ({"maxLength": 1000}, False),
])
def test_coder_long_string_values(qwen2_backend, schema, closing_tag_ok):
    """A multi-line value with `<` walks its grammar whatever its bound; `</b>` only where the bound is
    short enough to be counted beside the close-tag exclusion (or absent)."""
    tool = {"type": "function", "function": {"name": "edit", "parameters": {
        "type": "object", "properties": {"code": schema}, "required": ["code"]}}}
    grammar = forced_tool_grammar([tool], "required", "coder")
    for value, ok in (("if x < 3:\n    y = '<b>'", True), ("s = '</b>'", closing_tag_ok)):
        text = (f"<tool_call>\n<function=edit>\n<parameter=code>\n{value}\n</parameter>\n</function>\n"
                f"</tool_call>")
        if ok:
            walk(qwen2_backend, grammar, qwen2_backend.tokenizer.encode(text))
            assert parsed("coder", text) == [("edit", {"code": value})]
        else:
            with pytest.raises(AssertionError):
                walk(qwen2_backend, grammar, qwen2_backend.tokenizer.encode(text))
