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


def test_special_ids_and_end_of_generation() -> None:
    phi3 = tokenizer_for("phi-3")  # EOS from metadata, <|end|> found by its text as EOT
    assert (phi3.bos_id, phi3.eos_id, phi3.eot_id, phi3.add_bos) == (1, 32000, 32007, True)
    assert phi3.eog_ids == {32000, 32007}
    assert phi3.encode_prompt("Hi") == [1, *phi3.encode("Hi")]
    assert phi3.decode([1, 32007, 15043], skip_special=True) == " Hello"  # rstrip/space as llama.cpp
    gpt2 = tokenizer_for("gpt-2")
    assert gpt2.eog_ids == {50256} and not gpt2.add_bos and gpt2.vocab_size == 50257
    assert gpt2.encode("<|endoftext|>") != [50256]
    assert gpt2.encode("<|endoftext|>", parse_special=True) == [50256]


def test_user_defined_tokens_match_without_parse_special() -> None:
    mpt = tokenizer_for("mpt")  # runs of spaces are user-defined tokens, matched like llama.cpp does
    ids = mpt.encode("a    b")
    assert any(mpt.vocab.types[i] == 4 for i in ids) and mpt.decode(ids) == "a    b"
