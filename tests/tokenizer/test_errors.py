"""Metadata orcd cannot tokenize with fails with one clear TokenizerError, never a silent guess."""

from __future__ import annotations

import pytest
from tokenizer_testdata import Vocabs

from orcd.errors import TokenizerError
from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.build import bytes_to_unicode


@pytest.fixture(scope="module")
def gpt2_md(vocabs: Vocabs) -> dict:
    return dict(open_gguf(vocabs.path("gpt-2")).metadata)


def test_unknown_pre_tokenizer_is_refused(gpt2_md: dict) -> None:
    with pytest.raises(TokenizerError, match="unknown tokenizer.ggml.pre 'mystery-bpe'"):
        load_tokenizer({**gpt2_md, "tokenizer.ggml.pre": "mystery-bpe"})


@pytest.mark.parametrize(("change", "message"), [
    ({"tokenizer.ggml.model": "t5"}, "unsupported tokenizer.ggml.model"),
    ({"tokenizer.ggml.merges": None}, "merges"),
    ({"tokenizer.ggml.tokens": []}, "tokens"),
    ({"tokenizer.ggml.token_type": [1, 2]}, "entries"),
    ({"tokenizer.ggml.merges": ["nospace"]}, "malformed merge"),
])
def test_bad_metadata(gpt2_md: dict, change: dict, message: str) -> None:
    md = {k: v for k, v in {**gpt2_md, **change}.items() if v is not None}
    with pytest.raises(TokenizerError, match=message):
        load_tokenizer(md)


@pytest.mark.parametrize("pre", ["default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder",
                                 "falcon", "starcoder", "refact", "mpt", "gpt-neox", "smollm"])
def test_supported_pre_tokenizers_build(pre: str) -> None:
    # byte alphabet only, no merges: every split rule compiles and the text survives
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.merges": [],
          "tokenizer.ggml.tokens": sorted(bytes_to_unicode().values())}
    tok = load_tokenizer(md)
    text = "Hello, world!  123 ... naïve 東京\n\tx"
    assert tok.decode(tok.encode(text)) == text


def test_missing_pre_tokenizer_warns_loudly(gpt2_md: dict, caplog: pytest.LogCaptureFixture) -> None:
    md = {k: v for k, v in gpt2_md.items() if k != "tokenizer.ggml.pre"}
    with caplog.at_level("WARNING", logger="orcd.tokenizer"):
        tok = load_tokenizer(md)
    assert "tokenizer.ggml.pre" in caplog.text and tok.vocab.pre == "default"
