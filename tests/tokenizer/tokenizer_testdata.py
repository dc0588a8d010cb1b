"""llama.cpp's vocabularies and test vectors (pinned, fetched by orcd.testdata) and the helpers to use them.

`fetched()` obtains the data once per process (at collection, so the cases can be parametrized); tests
reach it through the session fixture `vocabs` (conftest.py), which skips with one line when it is missing.
"""

from __future__ import annotations

import functools
from pathlib import Path

from orcd import testdata
from orcd.errors import TokenizerError
from orcd.gguf import open_gguf
from orcd.tokenizer import GGUFTokenizer, load_tokenizer

# vocabulary -> the tokenizer.ggml.model orcd refuses it by (test_vocab_cases asserts the refusal; its
# cases are not run)
REFUSED: dict[str, str] = {
    "bert-bge": "bert",  # WordPiece
}


@functools.cache
def fetched() -> tuple[testdata.TestData | None, str]:
    """(the test data, "") or (None, one line saying why it is missing and how to fetch it)."""
    try:
        return testdata.fetch(), ""
    except (testdata.TestDataError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"llama.cpp test data missing ({first}); {testdata.FETCH_HINT}"


class Vocabs:
    """The fetched vocabularies: paths, tokenizers (each loaded once) and test cases by name."""

    def __init__(self, data: testdata.TestData) -> None:
        self.data = data
        self.names = [name for name in data.vocabs() if name not in REFUSED]
        self.refused = [name for name in data.vocabs() if name in REFUSED]

    def path(self, name: str) -> Path:
        return self.data.vocab_path(name)

    def tokenizer(self, name: str) -> GGUFTokenizer:
        tok = _tokenizer(self.path(name))
        if isinstance(tok, TokenizerError):  # a vocabulary orcd refuses: refused again at once
            raise TokenizerError(str(tok))
        return tok

    def cases(self, name: str) -> list[tuple[str, list[int]]]:
        return read_cases(self.path(name))

    def templates(self) -> list[Path]:
        """llama.cpp's collection of real models' chat templates (`<model>.jinja`)."""
        return self.data.templates()


@functools.cache
def _tokenizer(path: Path) -> GGUFTokenizer | TokenizerError:
    try:
        return load_tokenizer(open_gguf(path).metadata)
    except TokenizerError as e:
        return e


@functools.cache
def read_cases(path: Path) -> list[tuple[str, list[int]]]:
    """(text, expected ids) pairs of a vocabulary's .inp/.out files: texts separated by lines
    `__ggml_vocab_test__`, one line of space-separated ids per text."""
    texts, lines = [], []
    for line in path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n"):
        if line == "__ggml_vocab_test__":
            texts.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    expected = path.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")[: len(texts)]
    return [(t, [int(x) for x in e.split()]) for t, e in zip(texts, expected, strict=True)]


# Qwen 2 split rule exactly as its tokenizer.json writes it (llama.cpp spells the (?i:) part out)
QWEN2_HF_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. It's 12345 o'clock; we'll see.",
    "Tokenizers split text into pieces:   spaces,\ttabs,\nnewlines\n\n and punctuation!!! ???",
    "Über naïve café — 東京 と 大阪 🦙 emoji, ünïcödé and numbers 3.14159 2718.",
    "def f(x):\n    return x * 2  # code with indentation\n\tif (a && b) { c++; }",
]


def train_chatml_bpe(path: Path, vocab_size: int = 600, chat_template: str | None = None):
    """Train a byte-level BPE the way the demo model's helper does (qwen2 split rule, ChatML specials
    as control tokens) and write it as a vocab-only GGUF. Returns the `tokenizers.Tokenizer`."""
    import gguf
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_HF_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=CHATML_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT * 20, trainer)
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    import json
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), arch="qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in CHATML_SPECIALS else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return tok
