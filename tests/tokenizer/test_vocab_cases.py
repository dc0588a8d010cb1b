"""Every llama.cpp test vector of every shared vocabulary: exact ids, and decode back to the text."""

from __future__ import annotations

import pytest
from tokenizer_testdata import VOCABS, read_cases, tokenizer_for

CASES = [pytest.param(name, i, id=f"{name}-{i}") for name in VOCABS for i in range(len(read_cases(name)))]


def test_found_all_vocabularies() -> None:
    assert {"gpt-2", "llama-spm", "phi-3", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
            "refact", "mpt"} <= set(VOCABS)


@pytest.mark.parametrize(("name", "index"), CASES)
def test_encode_matches_llama_cpp(name: str, index: int) -> None:
    text, expected = read_cases(name)[index]
    assert tokenizer_for(name).encode(text) == expected


@pytest.mark.parametrize(("name", "index"), CASES)
def test_decode_round_trips(name: str, index: int) -> None:
    tok = tokenizer_for(name)
    text, expected = read_cases(name)[index]
    unk = tok.vocab.special.get("unknown")
    if unk is not None and unk in expected and tok.vocab.model == "llama":
        pytest.skip("text holds characters the vocabulary maps to <unk>")
    assert tok.decode(expected) == text
