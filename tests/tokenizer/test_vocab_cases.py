"""Every llama.cpp test vector of every fetched vocabulary: exact ids, and decode back to the text."""

from __future__ import annotations

import pytest
from tokenizer_testdata import REFUSED, Vocabs, read_cases

from orcd.errors import TokenizerError
from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer

# the vocabularies with test vectors in llama-cpp-python 0.3.36 (orcd.testdata), and their case count
VOCABS = {"bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
          "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"}
N_CASES = 693


def test_found_all_vocabularies_and_cases(vocabs: Vocabs) -> None:
    assert set(vocabs.names) | set(vocabs.refused) == VOCABS and set(vocabs.refused) == set(REFUSED)
    assert sum(len(read_cases(vocabs.path(name))) for name in VOCABS) == N_CASES


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_vocabularies_are_refused_by_name(vocabs: Vocabs, name: str) -> None:
    with pytest.raises(TokenizerError, match=f"unsupported tokenizer.ggml.model '{REFUSED[name]}': "):
        vocabs.tokenizer(name)


def test_encode_matches_llama_cpp(vocabs: Vocabs, vocab_case: tuple[str, int]) -> None:
    name, index = vocab_case
    text, expected = vocabs.cases(name)[index]
    assert vocabs.tokenizer(name).encode(text) == expected


def test_decode_round_trips(vocabs: Vocabs, vocab_case: tuple[str, int]) -> None:
    name, index = vocab_case
    tok = vocabs.tokenizer(name)
    text, expected = vocabs.cases(name)[index]
    unk = tok.vocab.special.get("unknown")
    if unk is not None and unk in expected and tok.vocab.model == "llama":
        pytest.skip("text holds characters the vocabulary maps to <unk>")
    assert tok.decode(expected) == text


def test_special_ids_and_end_of_generation(vocabs: Vocabs) -> None:
    phi3 = vocabs.tokenizer("phi-3")  # EOS from metadata, <|end|> found by its text as EOT
    assert (phi3.bos_id, phi3.eos_id, phi3.eot_id, phi3.add_bos) == (1, 32000, 32007, True)
    assert phi3.eog_ids == {32000, 32007}
    assert phi3.encode_prompt("Hi") == [1, *phi3.encode("Hi")]
    assert phi3.decode([1, 32007, 15043], skip_special=True) == " Hello"  # rstrip/space as llama.cpp
    gpt2 = vocabs.tokenizer("gpt-2")
    assert gpt2.eog_ids == {50256} and not gpt2.add_bos and gpt2.vocab_size == 50257
    assert gpt2.encode("<|endoftext|>") != [50256]
    assert gpt2.encode("<|endoftext|>", parse_special=True) == [50256]


def test_user_defined_tokens_match_without_parse_special(vocabs: Vocabs) -> None:
    mpt = vocabs.tokenizer("mpt")  # runs of spaces are user-defined tokens, matched like llama.cpp does
    ids = mpt.encode("a    b")
    assert any(mpt.vocab.types[i] == 4 for i in ids) and mpt.decode(ids) == "a    b"


def test_gemma4_bos_end_of_generation_and_newline_runs(vocabs: Vocabs) -> None:
    gemma4 = vocabs.tokenizer("gemma-4")  # BPE with merges over '▁'-escaped UTF-8, lines merged apart
    assert gemma4.add_bos and gemma4.encode_prompt("Hi")[0] == gemma4.bos_id == 2
    assert {gemma4.vocab.tokens[i] for i in gemma4.eog_ids} == {"<eos>", "<turn|>", "<|tool_response>"}
    assert gemma4.encode("\n\n\n") == [gemma4.vocab.index["\n\n\n"]]  # a newline run that is a token
    assert gemma4.decode(gemma4.encode("a\n\n\nb  c")) == "a\n\n\nb  c"


@pytest.mark.parametrize("pre", ["gemma4", "granite-embed-multi-311m"])
def test_gemma4_pre_tokenizer_names_with_gpt2_model(vocabs: Vocabs, pre: str) -> None:
    md = {**open_gguf(vocabs.path("gemma-4")).metadata, "tokenizer.ggml.model": "gpt2",
          "tokenizer.ggml.pre": pre}
    tok = load_tokenizer(md)
    for text, expected in vocabs.cases("gemma-4")[:20]:
        assert tok.encode(text) == expected
