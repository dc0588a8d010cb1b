"""The array-based search for SentencePiece splits finds exactly what the plain Python search finds."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizer_testdata import Vocabs

from orcd.gguf import open_gguf
from orcd.tokenizer import spm_merges as sm
from orcd.tokenizer.vocab import read_vocab


def _reference(tokens: list[str]) -> set[tuple[int, int, int]]:
    ids = {t: i for i, t in enumerate(tokens)}
    return {(i, ids[t[:c]], ids[t[c:]]) for i, t in enumerate(tokens) for c in range(1, len(t))
            if t[:c] in ids and t[c:] in ids}


def _found(tokens: list[str]) -> set[tuple[int, int, int]]:
    m, left, right = sm.split_pairs(tokens, {t: i for i, t in enumerate(tokens)})
    out = set(zip(m.tolist(), left.tolist(), right.tolist(), strict=True))
    assert len(out) == len(m)  # no split twice
    return out


def _synthetic(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = ["a", "b", "▁", "é", "東", "🦙", "\udcff", " "]
    tokens = set(alphabet)
    for _ in range(3000):
        tokens.add("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 7))))
    long = "ab" * 100  # beyond _MAX_LEN: the slow path
    tokens |= {long, long + "▁", "ab" * 64 + "b"}
    return sorted(tokens)


def test_synthetic_vocabulary_matches_the_plain_search() -> None:
    tokens = _synthetic()
    assert _found(tokens) == _reference(tokens)


def test_shared_hash_falls_back_to_the_exact_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sm, "_BASE", np.uint64(0))  # every token hashes to its last char: many collisions
    tokens = _synthetic(1)
    assert _found(tokens) == _reference(tokens)


def test_a_candidate_whose_text_differs_is_dropped() -> None:
    tokens = ["ab", "a", "b", "c"]
    codes, starts, lens = sm._codes(tokens)
    ok = sm._same_text(codes, starts, lens, np.array([0, 0, 0]), np.array([1, 1, 3]), np.array([2, 3, 2]))
    assert ok.tolist() == [True, False, False]


def test_llama_cpp_sentencepiece_vocabularies(vocabs: Vocabs) -> None:
    for name in ("llama-spm", "phi-3"):
        tokens = read_vocab(open_gguf(vocabs.path(name)).metadata).tokens
        assert _found(tokens) == _reference(tokens)


@pytest.mark.parametrize("tokens", [["a"], ["a", "b", "c"], ["x" * 200, "x" * 199, "x"], ["ab", "a", "b"]])
def test_small_and_odd_vocabularies(tokens: list[str]) -> None:
    assert _found(tokens) == _reference(tokens)
