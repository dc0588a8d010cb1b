"""Request fields -> grammars (400 naming the field), the bitmask unpacking, and the matcher on a real
vocabulary (llama.cpp's qwen2 test vocabulary)."""

from __future__ import annotations

import json

import pytest
import torch

from orcd.errors import RequestError
from orcd.structured.grammars import response_format_grammar
from orcd.structured.mask import apply_mask, bits_numpy, bits_shift, unpack_bitmask
from orcd.structured.tool_grammar import forced_tool_grammar

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}]


@pytest.mark.parametrize("rf, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x", "strict": "yes"}},
     "response_format.json_schema.strict"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_object", "schema": {}}, "response_format.schema"),
    ({"type": "regex", "regex": "[a-"}, "response_format.regex"),
    ({"type": "grammar", "grammar": "root ::= undefined_rule"}, "response_format.grammar"),
    ({"type": "grammar", "grammar": "start: nothing_here"}, "response_format.grammar"),
    ({"type": "yaml"}, "response_format.type"),
    ("json", "response_format"),
])
def test_bad_response_format_names_the_field(rf, param):
    with pytest.raises(RequestError) as err:
        response_format_grammar(rf)
    assert err.value.param == param and param in str(err.value)


def test_response_format_kinds_compile():
    assert response_format_grammar(None) is None and response_format_grammar({"type": "text"}) is None
    integer = {"name": "x", "schema": {"type": "integer"}, "strict": True}
    for rf in ({"type": "json_object"}, {"type": "regex", "regex": "[a-z]+"},
               {"type": "grammar", "grammar": 'root ::= "a" [0-9]+'},
               {"type": "grammar", "grammar": 'start: "a"+'},
               {"type": "json_schema", "json_schema": integer}):
        assert isinstance(response_format_grammar(rf), str)


@pytest.mark.parametrize("choice, tools, param", [
    ({"type": "function", "function": {"name": "nope"}}, TOOLS, "tool_choice.function.name"),
    ({"type": "function"}, TOOLS, "tool_choice"),
    ("required", [{"type": "function", "function": {"name": "f", "parameters": {"type": "wat"}}}],
     "tools.0.function.parameters"),
])
def test_bad_forced_choice_names_the_field(choice, tools, param):
    with pytest.raises(RequestError) as err:
        forced_tool_grammar(tools, choice)
    assert err.value.param == param


def test_forced_choice_needs_a_known_format():
    with pytest.raises(RequestError, match="format"):
        forced_tool_grammar(TOOLS, "required", "pythonic")


def test_unpack_bitmask_matches_a_bit_loop():
    gen = torch.Generator().manual_seed(0)
    bitmask = torch.randint(-2**31, 2**31 - 1, (3, 4), generator=gen, dtype=torch.int64).to(torch.int32)
    vocab = 150  # padded past 4 * 32 = 128 tokens: the tail is never allowed
    want = torch.zeros(3, vocab, dtype=torch.bool)
    for r in range(3):
        for t in range(128):
            want[r, t] = bool((int(bitmask[r, t // 32]) >> (t % 32)) & 1)
    assert torch.equal(unpack_bitmask(bitmask, vocab), want)
    assert torch.equal(unpack_bitmask(bitmask, 100), want[:, :100])
    assert torch.equal(bits_shift(bitmask), bits_numpy(bitmask))  # the device path computes the same


def test_apply_mask_touches_only_constrained_rows():
    logits = torch.randn(4, 64)
    bitmask = torch.zeros(1, 2, dtype=torch.int32)
    bitmask[0, 1] = 1 << 3  # token 35 only
    out = apply_mask(logits, [2], bitmask)
    assert torch.equal(out[[0, 1, 3]], logits[[0, 1, 3]])
    assert out[2].argmax() == 35 and torch.isinf(out[2]).sum() == 63
    assert apply_mask(logits, [], bitmask) is logits


def test_apply_mask_on_every_row_in_any_order():
    """Every row masked, bitmask rows given out of batch order (guide.py's fill order): row rows[i] gets
    bitmask row i, as one row at a time would."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 64, generator=gen)
    bitmask = torch.randint(-2**31, 2**31 - 1, (4, 2), generator=gen, dtype=torch.int64).to(torch.int32)
    rows = [2, 0, 3, 1]
    want = torch.stack([apply_mask(logits[r:r + 1], [0], bitmask[rows.index(r)][None])[0] for r in range(4)])
    assert torch.equal(apply_mask(logits, rows, bitmask), want)
    assert torch.equal(apply_mask(logits, [0, 1, 2, 3], bitmask[[1, 3, 0, 2]]), want)


@pytest.fixture(scope="module")
def qwen2_backend():
    from orcd import testdata
    from orcd.gguf.reader import open_gguf
    from orcd.structured.backend import GrammarBackend
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(testdata.fetch().vocab_path("qwen2")).metadata)
    return GrammarBackend(tok)


def test_matcher_on_the_qwen2_vocabulary_ends_with_eos(qwen2_backend):
    """A JSON text tokenized by orcd walks the matcher; every token is allowed by the mask before it;
    once the object is complete only the EOS tokens are."""
    b = qwen2_backend
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "yz"]}},
              "required": ["a", "b"], "additionalProperties": False}
    grammar = response_format_grammar({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
    b.check(grammar)
    m = b.matcher(grammar)
    for t in b.tokenizer.encode(json.dumps({"a": 12, "b": "yz"}, separators=(",", ":"))):
        allowed = unpack_bitmask(b.fill([m]), b.vocab_size)[0]
        assert allowed[t], b.tokenizer.decode([t])
        m.consume(t)
    allowed = unpack_bitmask(b.fill([m]), b.vocab_size)[0]
    assert sorted(allowed.nonzero().flatten().tolist()) == sorted(b.eos_ids)
    m.consume(b.eos_ids[0])
    assert m.done


def test_a_matcher_in_error_allows_only_eos(qwen2_backend):
    b = qwen2_backend
    m = b.matcher(response_format_grammar({"type": "regex", "regex": "a+"}))
    m.consume(b.tokenizer.encode("zzz")[0])  # forbidden: the matcher enters its error state
    allowed = unpack_bitmask(b.fill([m]), b.vocab_size)[0]
    assert m.done and sorted(allowed.nonzero().flatten().tolist()) == sorted(b.eos_ids)


def test_check_names_the_param(qwen2_backend):
    with pytest.raises(RequestError) as err:
        qwen2_backend.check('{"grammars": 3}', param="tools")
    assert err.value.param == "tools"


@pytest.mark.parametrize("style", ["hermes", "llama", "mistral"])
def test_forced_call_text_matches_its_grammar_and_parses_back(qwen2_backend, style):
    """The text a forced call must take is accepted by its grammar to the end, and the template family's
    parser (orcd.server.tools) reads it back as the call."""
    from orcd.server.tools import message_fields, with_tools
    from orcd.structured.tool_grammar import STYLES

    head, key, tail = STYLES[style]
    text = head + json.dumps({"name": "get_weather", key: {"city": "Oslo"}}, separators=(",", ":")) + tail
    m = qwen2_backend.matcher(forced_tool_grammar(TOOLS, "required", style))
    for t in qwen2_backend.tokenizer.encode(text):
        assert unpack_bitmask(qwen2_backend.fill([m]), qwen2_backend.vocab_size)[0, t]
        m.consume(t)
    assert m.m.is_accepting()
    (call,) = message_fields(with_tools(None, False, style)(), text)["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
