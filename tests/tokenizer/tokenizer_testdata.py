"""The llama.cpp vocabularies in ../shared/testdata/vocab, each loaded once per test session."""

from __future__ import annotations

import functools
from pathlib import Path

from orcd.gguf import open_gguf
from orcd.tokenizer import GGUFTokenizer, load_tokenizer

VOCAB_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "vocab"
VOCABS = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in VOCAB_DIR.glob("ggml-vocab-*.gguf"))


def vocab_path(name: str) -> Path:
    return VOCAB_DIR / f"ggml-vocab-{name}.gguf"


@functools.cache
def tokenizer_for(name: str) -> GGUFTokenizer:
    return load_tokenizer(open_gguf(vocab_path(name)).metadata)


def read_cases(name: str) -> list[tuple[str, list[int]]]:
    """(text, expected ids) pairs of a vocabulary's .inp/.out files (format in shared/README.md)."""
    path = vocab_path(name)
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
