"""The fast paths of vocabulary loading give what the plain paths give, and fall back where they must."""

from __future__ import annotations

import pytest
from tokenizer_testdata import Vocabs

from orcd.errors import TokenizerError
from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.build import build_bpe
from orcd.tokenizer.vocab import _merges, read_vocab


def plain_merges(raw: list) -> list[tuple[str, str]]:
    """The reference split: at the first space after the first char."""
    out = []
    for m in raw:
        pos = m.find(" ", 1)
        assert pos > 0
        out.append((m[:pos], m[pos + 1:]))
    return out


@pytest.fixture(scope="module")
def gpt2_md(vocabs: Vocabs) -> dict:
    return dict(open_gguf(vocabs.path("gpt-2")).metadata)


def test_merges_fast_path_equals_plain_split(gpt2_md: dict) -> None:
    raw = gpt2_md["tokenizer.ggml.merges"]
    assert _merges(gpt2_md) == plain_merges(raw)


@pytest.mark.parametrize("raw", [
    [" a b", "c d"],  # leading space: the split is at the next space, as llama.cpp does
    ["a b c", "  x"],  # two spaces: the first one after char 0
    ["a b", " "],  # a lone space has no space after char 0: malformed
])
def test_merges_with_odd_spaces(raw: list[str]) -> None:
    md = {"tokenizer.ggml.merges": raw}
    if all(m.find(" ", 1) > 0 for m in raw):
        assert _merges(md) == plain_merges(raw)
    else:
        with pytest.raises(TokenizerError, match="malformed merge"):
            _merges(md)


def test_merge_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TokenizerError, match="malformed merge"):
        _merges({"tokenizer.ggml.merges": ["a b", 7]})


def test_index_and_duplicates(gpt2_md: dict) -> None:
    v = read_vocab(gpt2_md)
    assert v.index == {t: i for i, t in enumerate(v.tokens)}
    tokens = list(gpt2_md["tokenizer.ggml.tokens"])
    with pytest.raises(TokenizerError, match="duplicate"):
        read_vocab({**gpt2_md, "tokenizer.ggml.tokens": tokens[:-1] + [tokens[0]]})
    tokens[5] = ""  # empty texts get unique placeholders, as before
    v = read_vocab({**gpt2_md, "tokenizer.ggml.tokens": tokens})
    assert v.tokens[5] == "[EMPTY_5]" and v.index["[EMPTY_5]"] == 5


def test_merges_outside_the_vocab_are_dropped(gpt2_md: dict) -> None:
    # tokenizers refuses such merges: the build retries with them filtered out, and encodes as if the
    # file had never held them
    raw = gpt2_md["tokenizer.ggml.merges"]
    bad = {**gpt2_md, "tokenizer.ggml.merges": ["zzq\u0120 qqz", *raw, "Hello nonexistent\u0121tok"]}
    text = "Hello world, the merges are all there. 1234 + 5678"
    assert build_bpe(read_vocab(bad)).encode(text).ids == build_bpe(read_vocab(gpt2_md)).encode(text).ids
    assert load_tokenizer(bad).encode(text) == load_tokenizer(gpt2_md).encode(text)
