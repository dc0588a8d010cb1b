"""A Harmony (gpt-oss) vocabulary as llama.cpp reads it: <|return|> and <|call|> end generation and <|end|>
does not (it closes the analysis message before the answer); <|channel|>, <|message|>, <|start|> and
<|constrain|> are user-defined, so decoding with special tokens skipped keeps the channels for the parser."""

from __future__ import annotations

from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.harmony import parse_harmony
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
