"""Long text is cut into parts encoded in parallel: the ids must equal encoding it in one piece."""

from __future__ import annotations

import random

from tokenizer_testdata import Vocabs

from orcd.tokenizer import tokenizer as tokenizer_module


def _long_text(vocabs: Vocabs, name: str) -> str:
    rng = random.Random(0)
    cases = [t for t, _ in vocabs.cases(name)]
    words = ["the", "quick", "brown  ", "fox", "said:", "'hello'", "\n\n", "  world!", "\n\t", "x = 42",
             "naïve", "東京", "🦙", "   ", "\n    "]
    parts = [rng.choice(cases) if rng.random() < 0.2 else " ".join(rng.choices(words, k=8))
             for _ in range(1000)]
    return " ".join(parts)


def test_parallel_parts_equal_one_piece(vocabs: Vocabs, vocab_name: str, monkeypatch) -> None:
    tok = vocabs.tokenizer(vocab_name)
    text = _long_text(vocabs, vocab_name)
    monkeypatch.setattr(tokenizer_module, "_CHUNK", 256)  # many cuts
    parallel = tok.encode(text, parse_special=True)
    monkeypatch.setattr(tokenizer_module, "_CHUNK", len(text) + 1)  # no cuts: one piece per fragment
    assert tok.encode(text, parse_special=True) == parallel
