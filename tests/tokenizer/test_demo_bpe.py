"""A BPE trained with `tokenizers` (as the demo model's helper does), written to GGUF, loaded back:
ids equal the original `tokenizers` object's on varied text."""

from __future__ import annotations

import pytest
from tokenizer_testdata import TRAIN_TEXT, train_chatml_bpe

from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer

TEXTS = TRAIN_TEXT + [
    "", " ", "   leading and trailing   ", "\n\n\n", "\r\n windows\r\nlines", "UPPER lower MiXeD 'S 'LL",
    "unseen words: xylophone zebra quixotic", "数字 12 345 6789 and 💡🚀 emoji", "a\u00a0non-breaking space",
    "tabs\t\tand\x0bvertical", "Ελληνικά και русский текст", "<|im_start|> typed by a user <|im_end|>",
    "<|im_end|><|im_end|>x<|endoftext|>",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("demo") / "chatml-bpe.gguf"
    hf = train_chatml_bpe(path)
    return hf, load_tokenizer(open_gguf(path).metadata)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_tokenizers(pair, text: str) -> None:
    hf, tok = pair
    assert tok.encode(text, parse_special=True) == hf.encode(text, add_special_tokens=False).ids
    assert tok.decode(tok.encode(text)) == text


def test_special_tokens_only_when_parsed(pair) -> None:
    hf, tok = pair
    im_end = hf.token_to_id("<|im_end|>")
    assert im_end in tok.eog_ids and tok.eos_id == im_end
    assert im_end not in tok.encode("say <|im_end|> now")
    assert im_end in tok.encode("say <|im_end|> now", parse_special=True)
    assert not tok.add_bos and tok.encode_prompt("hi") == tok.encode("hi")
