"""A Harmony (gpt-oss) vocabulary as llama.cpp reads it: <|return|> and <|call|> end generation and <|end|>
does not (it closes the analysis message before the answer); <|channel|>, <|message|>, <|start|> and
<|constrain|> are user-defined, so decoding with special tokens skipped keeps the channels for the parser."""

from __future__ import annotations

from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.harmony import parse_harmony
from orcd.tokenizer.pretokenizers import split_rules
from orcd.tokenizer.vocab import CONTROL, USER_DEFINED


def test_harmony_end_of_generation_and_rendered_markup() -> None:
    tok = load_tokenizer(synthetic_tokenizer_metadata(600, "gpt-oss", seed=1))
    ids = {t: tok.vocab.index[t] for t in ("<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|start|>")}
    assert {ids["<|return|>"], ids["<|call|>"]} <= tok.eog_ids and ids["<|end|>"] not in tok.eog_ids
    assert tok.vocab.types[ids["<|channel|>"]] == tok.vocab.types[ids["<|start|>"]] == USER_DEFINED
    assert tok.vocab.types[ids["<|end|>"]] == CONTROL
    text = ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
            "<|return|>")
    out = tok.encode(text, parse_special=True)
    assert ids["<|end|>"] in out and ids["<|channel|>"] in out
    for skip in (False, True):
        r = parse_harmony(tok.decode(out, skip_special=skip))
        assert (r.reasoning_content, r.content) == ("Think.", "Hi!")


def test_gpt_4o_split_is_o200k() -> None:
    """o200k's split: case changes start words, digits in threes, punctuation leads the next word."""
    from tokenizers import Regex, pre_tokenizers

    (rule,) = split_rules("gpt-4o")
    split = pre_tokenizers.Split(Regex(rule), behavior="isolated")
    pieces = [p for p, _ in split.pre_tokenize_str("HelloWorld ABCdef don'T 1234567 a/b\n\n  x  ÉTÉ été")]
    assert pieces == ["Hello", "World", " ABCdef", " don'T", " ", "123", "456", "7", " a", "/b", "\n\n", " ",
                      " x", " ", " ÉTÉ", " été"]
