"""orcd's tokenizer slices (backend.MASK_SLICES: JSON string content of 1..k characters, so that inside a
string with maxLength fewer tokens walk the trie) give the same mask as llguidance's default slices, at
every step of walks through bounded strings, on the demo vocabulary and llama.cpp's qwen2 vocabulary."""

from __future__ import annotations

import random

import llguidance
import numpy as np
import pytest
import torch

from orcd.structured.backend import MASK_SLICES, STRING_CHAR, GrammarBackend, content_slices
from orcd.structured.grammars import json_schema_grammar

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "code": {"type": "string", "minLength": 2, "maxLength": 3}, "email": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
    "required": ["name", "age", "code", "email", "tags"], "additionalProperties": False}
SCHEMA = {"type": "array", "items": PERSON, "minItems": 50}


def _tokenizer(name: str):
    from orcd.gguf import open_gguf
    from orcd.hub import DEMO_MODEL_PATH
    from orcd.tokenizer import load_tokenizer

    if name == "demo":
        return load_tokenizer(open_gguf(DEMO_MODEL_PATH).metadata)
    from orcd import testdata

    try:
        path = testdata.fetch().vocab_path(name)
    except (testdata.TestDataError, OSError) as err:
        pytest.skip(f"llama.cpp's vocabularies: {err}")
    return load_tokenizer(open_gguf(path).metadata)


def _pick(bitmask: torch.Tensor, short: np.ndarray | None, rng: random.Random) -> int:
    """A random token of a bitmask row [W] int32; with `short` ([32 W] bool: tokens of at most 2 bytes),
    one of those where any is allowed, so that strings fill one character at a time and every budget left
    is visited."""
    allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little").astype(bool)
    few = np.flatnonzero(allowed & short) if short is not None else []
    return int(rng.choice(few if len(few) else np.flatnonzero(allowed)))


@pytest.mark.parametrize("vocab", ["demo", "qwen2"])
def test_mask_slices_give_llguidance_default_masks(vocab):
    """Walks of 150 tokens (random allowed tokens: long strings; short tokens: every budget left) on
    fresh matchers: each step's bitmask with MASK_SLICES equals the one with llguidance's defaults, and
    the walks get inside the 40-character name with at most 2 characters left."""
    tok = _tokenizer(vocab)
    ref, ours = GrammarBackend(tok, slices=None), GrammarBackend(tok)
    grammar = json_schema_grammar(SCHEMA, "s")
    names_filled, steps = 0, 0
    two_bytes = np.zeros(32 * ref.words, dtype=bool)
    two_bytes[: tok.vocab_size] = [len(p) <= 2 for p in tok.pieces]
    for seed, short in ((0, False), (1, True), (2, True)):
        rng = random.Random(seed)
        a, b = ref.matcher(grammar), ours.matcher(grammar)
        text = b""
        for _ in range(150):
            want, got = ref.fill([a]), ours.fill([b])
            assert torch.equal(want, got), (vocab, seed, text[-60:])
            t = _pick(want[0], two_bytes if short else None, rng)
            a.consume(t)
            b.consume(t)
            text += tok.pieces[t]
            steps += 1
            name = text.rsplit(b'"name":"', 1)[-1]
            names_filled += b'"' not in name and len(name.decode("utf-8", "replace")) >= 38
        assert not a.m.is_error() and not b.m.is_error()
    assert steps == 450 and names_filled > 0


def test_content_slices():
    """The defaults first (their order is llguidance's), then 1..k content slices, longest first, without
    the defaults' 10 and 30; GrammarBackend uses MASK_SLICES unless told, and None is llguidance's own."""
    general = llguidance.LLTokenizer.general_slices()
    got = content_slices([3, 10, 1, 30, 3])
    assert got == (*general, STRING_CHAR + "{1,3}", STRING_CHAR + "{1,1}")
    assert MASK_SLICES[: len(general)] == tuple(general) and len(set(MASK_SLICES)) == len(MASK_SLICES)
    tok = _tokenizer("demo")
    assert GrammarBackend(tok).slices == MASK_SLICES and GrammarBackend(tok, slices=None).slices is None
