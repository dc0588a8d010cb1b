"""llguidance's encode callback (backend._TokenizerView): each text is encoded once and then answered from
the view's memo; the ids are the tokenizer's, the memo stops growing at ENCODED_MAX texts, and the masks
of a walk through a JSON schema are the same as with a view that encodes every call."""

from __future__ import annotations

import random

import numpy as np
import torch

from orcd.gguf import open_gguf
from orcd.hub import DEMO_MODEL_PATH
from orcd.structured import backend as B
from orcd.structured.grammars import json_schema_grammar
from orcd.tokenizer import load_tokenizer

SCHEMA = {"type": "object", "properties": {
    "people": {"type": "array", "minItems": 30, "items": {
        "type": "object", "required": ["name", "age", "role"], "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "role": {"enum": ["admin", "user", "guest"]}}}}},
    "required": ["people"], "additionalProperties": False}


class CountingTokenizer:
    """The demo tokenizer, counting encode calls."""

    def __init__(self, tok):
        self._tok, self.calls = tok, 0

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return self._tok.encode(text)


def demo_tokenizer():
    return load_tokenizer(open_gguf(DEMO_MODEL_PATH).metadata)


def test_each_text_is_encoded_once_with_the_tokenizers_ids():
    tok = CountingTokenizer(demo_tokenizer())
    view = B._TokenizerView(tok)
    texts = ['{"people":[{"name":"', ',"age":', '"role":"', "héllo 🙂", '"name":"']
    for _ in range(3):
        for t in texts:
            assert view(t) == tok._tok.encode(t)
    assert view(b'"age":') == tok._tok.encode('"age":')  # bytes are decoded first
    assert tok.calls == len(texts) + 1


def test_the_memo_stops_at_encoded_max(monkeypatch):
    monkeypatch.setattr(B, "ENCODED_MAX", 3)
    tok = CountingTokenizer(demo_tokenizer())
    view = B._TokenizerView(tok)
    for i in range(5):
        assert view(f"key{i}") == tok._tok.encode(f"key{i}")
    assert len(view._seen) == 3
    view("key4")  # not kept: encoded again
    assert tok.calls == 6


def test_masks_equal_those_of_a_view_that_encodes_every_call(monkeypatch):
    """Two backends walk the same random allowed tokens of SCHEMA; one view keeps nothing."""
    tok = demo_tokenizer()
    kept = B.GrammarBackend(tok)
    kept.lltok  # noqa: B018 - its view built before ENCODED_MAX changes: it keeps texts
    monkeypatch.setattr(B, "ENCODED_MAX", 0)
    fresh = B.GrammarBackend(tok)
    grammar = json_schema_grammar(SCHEMA, "schema")
    ms = [kept.matcher(grammar), fresh.matcher(grammar)]
    rng = random.Random(5)
    for _ in range(120):
        masks = [b.fill([m]) for b, m in zip((kept, fresh), ms, strict=True)]
        assert torch.equal(masks[0], masks[1])
        bits = np.unpackbits(masks[0][0].numpy().view(np.uint8), bitorder="little")[: kept.vocab_size]
        token = int(rng.choice(np.flatnonzero(bits).tolist()))
        for m in ms:
            m.consume(token)
