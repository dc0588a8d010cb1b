"""Streaming detokenizer: increments are whole characters and join to exactly the full decode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_testdata import Vocabs

from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer


def _stream(tok, ids, **kw) -> list[str]:
    det = tok.detokenizer(**kw)
    return [det.push(i) for i in ids] + [det.flush()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_stream_equals_full_decode_on_random_ids(vocabs: Vocabs, vocab_name: str, data: st.DataObject):
    tok = vocabs.tokenizer(vocab_name)
    # bias towards byte tokens and the top of the vocabulary, where partial characters live
    any_id = st.integers(0, tok.vocab_size - 1)
    low_id = st.integers(0, min(tok.vocab_size - 1, 600))
    ids = data.draw(st.lists(st.one_of(any_id, low_id), max_size=40))
    skip = data.draw(st.booleans())
    assert "".join(_stream(tok, ids, skip_special=skip)) == tok.decode(
        ids, skip_special=skip, strip_leading_space=False)
    assert "".join(_stream(tok, ids, skip_special=skip, strip_leading_space=True)) == tok.decode(
        ids, skip_special=skip)


def test_split_character_is_held_back(vocabs: Vocabs, vocab_name: str) -> None:
    tok = vocabs.tokenizer(vocab_name)
    text = "a🦙b€"
    ids = tok.encode(text)
    parts = _stream(tok, ids, strip_leading_space=True)
    assert "".join(parts) == text
    assert all("\ufffd" not in p for p in parts)
    if len(ids) > len(text):  # some character took several tokens: the partial ones gave ''
        assert "" in parts[:-1]


def test_spm_leading_space(vocabs: Vocabs) -> None:
    tok = vocabs.tokenizer("llama-spm")
    ids = tok.encode("Hello world")
    assert tok.decode(ids) == "Hello world"
    assert tok.decode(ids, strip_leading_space=False) == " Hello world"
    assert "".join(_stream(tok, ids)) == " Hello world"  # a continuation keeps its space
    assert tok.decode([tok.bos_id, *ids]) == "<s> Hello world"
    assert tok.decode([tok.bos_id, *ids], skip_special=True) == " Hello world"


def test_flush_marks_truncated_character(vocabs: Vocabs) -> None:
    tok = vocabs.tokenizer("gpt-2")
    ids = tok.encode("🦙")
    det = tok.detokenizer()
    assert [det.push(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert det.flush() == "\ufffd"


@pytest.mark.parametrize("name", ["gpt-2", "llama-spm"])
def test_pieces_are_computed_when_a_token_is_first_decoded(vocabs: Vocabs, name: str) -> None:
    """The bytes of a token are worked out on its first decode, not for the whole vocabulary at load
    (~0.15 s of a 150k vocabulary), and are the same either way."""
    fresh = load_tokenizer(open_gguf(vocabs.path(name)).metadata)
    assert fresh.pieces.computed == 0
    ids = fresh.encode("Hello wörld 🦙, again: Hello")
    assert fresh.decode(ids) == vocabs.tokenizer(name).decode(ids)
    assert fresh.pieces.computed == len(set(ids))
    assert list(fresh.pieces) == list(vocabs.tokenizer(name).pieces)  # every entry, on demand
    assert fresh.pieces.computed == fresh.vocab_size
