"""The native llguidance tokenizer (orcd/structured/lltokenizers.py) against the view that calls back into
orcd's encode: chosen only where the vocabulary allows, and giving the view's masks, mask for mask, on
walks through JSON schemas, regexes, a forced tool call and grammars with forced text; grammars holding a
control token's text compile on the view."""

from __future__ import annotations

import random
from types import SimpleNamespace

import llguidance
import numpy as np
import pytest
import torch

from orcd import testdata
from orcd.gguf import open_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.hub import DEMO_MODEL_PATH
from orcd.structured.backend import GrammarBackend
from orcd.structured.grammars import json_schema_grammar, regex_grammar, text_grammar
from orcd.structured.lltokenizers import CONTROL, same_tokens
from orcd.structured.tool_grammar import forced_tool_grammar
from orcd.tokenizer import load_tokenizer

SCHEMA = {"type": "object", "properties": {
    "people": {"type": "array", "minItems": 3, "items": {
        "type": "object", "required": ["name", "age", "role", "note"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "maxLength": 9}, "age": {"type": "integer"},
                       "role": {"enum": ["admin", "user", "guest"]}, "note": {"type": "string"},
                       "score": {"type": "number"}}}}},
    "required": ["people"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}}]


def grammars() -> dict[str, str]:
    return {"schema": json_schema_grammar(SCHEMA, "s"),
            "regex": regex_grammar(r"(The answer is [0-9]{1,4}\. )+Done\.", "r"),
            "lark": text_grammar('start: "Weather: " W " in " C\nW: /[a-z]+/\nC: /[A-Z][a-z]{2,8}/', "g"),
            "tool": forced_tool_grammar(TOOLS, "required")}


def bits(mask: torch.Tensor, vocab: int) -> np.ndarray:
    return np.unpackbits(mask.numpy().view(np.uint8), bitorder="little")[:vocab]


def assert_same_masks(tok, grammar: str, steps: int, seed: int) -> int:
    """A random walk among the allowed tokens; the native backend's mask equals the view's at every step.
    Returns the steps walked."""
    native, view = GrammarBackend(tok), GrammarBackend(tok, native=False)
    assert native.lltok_for(grammar) is native.lltok and native.is_native and not view.is_native
    ms = [native.matcher(grammar), view.matcher(grammar)]
    rng = random.Random(seed)
    for step in range(steps):
        masks = [b.fill([m]) for b, m in zip((native, view), ms, strict=True)]
        assert torch.equal(masks[0], masks[1]), step
        if ms[0].done:
            return step
        allowed = np.flatnonzero(bits(masks[0][0], tok.vocab_size)).tolist()
        token = rng.choice(allowed)
        for m in ms:
            m.consume(token)
    return steps


def demo_tokenizer():
    return load_tokenizer(open_gguf(DEMO_MODEL_PATH).metadata)


@pytest.mark.parametrize("name", sorted(grammars()))
def test_native_masks_equal_the_views_on_the_demo_vocabulary(name):
    walked = [assert_same_masks(demo_tokenizer(), grammars()[name], 150, seed) for seed in range(3)]
    assert max(walked) >= 20  # the walks went somewhere


def test_native_where_the_vocabulary_allows():
    demo = GrammarBackend(demo_tokenizer())
    assert demo.lltok is not None and demo.is_native
    synth = GrammarBackend(load_tokenizer(synthetic_tokenizer_metadata(400, "qwen2", seed=1)))
    assert synth.lltok is not None and synth.is_native
    off = GrammarBackend(demo.tokenizer, native=False)
    assert off.lltok is not None and not off.is_native and off.view is off.lltok


def test_a_grammar_holding_a_control_token_compiles_on_the_view():
    """A JSON const spelling <|im_end|>: `tokenizers` would cut the control token out of the forced text;
    the matcher is the view's, and its masks are the view's all the way through."""
    b = GrammarBackend(demo_tokenizer())
    controls = [b.tokenizer.token_text(i) for i, t in enumerate(b.tokenizer.vocab.types) if t == CONTROL]
    grammar = json_schema_grammar({"const": f"a {controls[-1]} b"}, "s")
    assert b.lltok_for(grammar) is b.view is not b.lltok
    m = b.matcher(grammar)
    ref = llguidance.LLMatcher(b.view, grammar, log_level=0)
    for _ in range(40):
        mask = b.fill([m])[0]
        want = np.frombuffer(ref.compute_bitmask(), dtype=np.int32)
        if ref.is_stopped():
            break
        assert np.array_equal(mask.numpy(), want)
        token = int(np.flatnonzero(bits(mask, b.vocab_size))[0])
        m.consume(token)
        ref.consume_token(token)
    assert ref.is_stopped() and m.done
    b.check(grammar)  # compiles (on the view)


def test_same_tokens_refuses_a_token_read_differently():
    tok = demo_tokenizer()
    lltok = GrammarBackend(tok).lltok
    assert same_tokens(lltok, tok)
    pieces = list(tok.pieces)
    pieces[300] = pieces[300] + b"!"
    assert not same_tokens(lltok, SimpleNamespace(vocab_size=tok.vocab_size, pieces=pieces, vocab=tok.vocab))
    types = list(tok.vocab.types)
    types[300] = CONTROL
    assert not same_tokens(lltok, SimpleNamespace(vocab_size=tok.vocab_size, pieces=tok.pieces,
                                                  vocab=SimpleNamespace(types=types)))


def llama_cpp_tokenizer(name: str):
    try:
        data = testdata.fetch()
    except (testdata.TestDataError, OSError) as e:
        pytest.skip(f"llama.cpp test data missing ({e}); {testdata.FETCH_HINT}")
    return load_tokenizer(open_gguf(data.vocab_path(name)).metadata)


@pytest.mark.parametrize("name", ["qwen2", "llama-bpe"])
def test_native_masks_equal_the_views_on_real_vocabularies(name):
    tok = llama_cpp_tokenizer(name)
    for i, grammar in enumerate(grammars().values()):
        assert assert_same_masks(tok, grammar, 80, i) >= 10


@pytest.mark.parametrize("name", ["llama-spm", "deepseek-coder"])
def test_the_view_where_native_would_differ(name):
    """SentencePiece (merges outside `tokenizers`); deepseek-coder: user-defined tokens whose bytes
    llguidance would read byte-level ('õ' as 0xf5)."""
    b = GrammarBackend(llama_cpp_tokenizer(name))
    assert b.lltok is not None and not b.is_native
