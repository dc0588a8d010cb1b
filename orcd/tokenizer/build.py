"""Vocab -> the model doing the merge work: a `tokenizers.Tokenizer` (byte-level BPE, Gemma 4's BPE, or
SentencePiece BPE by scores where `sentencepiece` cannot serve it), or sentencepiece's BPE (spm_model).

Special tokens are not registered with `tokenizers`: GGUFTokenizer splits them out of the text first
(llama.cpp's partition rules), so the objects built here only ever see plain text.
"""

from __future__ import annotations

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from orcd.errors import TokenizerError
from orcd.gcpause import gc_paused
from orcd.tokenizer.pretokenizers import IGNORE_MERGES, split_rules
from orcd.tokenizer.spm_merges import split_pairs
from orcd.tokenizer.spm_model import SentencePieceBPE, sentencepiece_bpe
from orcd.tokenizer.vocab import Vocab


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def split_pre_tokenizer(rules: list[str]) -> pre_tokenizers.PreTokenizer:
    """The split rules as `tokenizers` Splits, applied in order, matches and gaps both kept."""
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), behavior="isolated") for r in rules])


def build_bpe(vocab: Vocab) -> Tokenizer:
    """Byte-level BPE with the split rules of `vocab.pre` (TokenizerError if unknown)."""
    rules = split_rules(vocab.pre)
    ids = vocab.index or {t: i for i, t in enumerate(vocab.tokens)}
    ignore = vocab.pre in IGNORE_MERGES
    try:  # a file's merges normally all lie in its vocab: skip the filter unless tokenizers refuses them
        model = models.BPE(ids, vocab.merges, ignore_merges=ignore)
    except Exception:  # tokenizers raises plain Exception on a merge (or its result) out of the vocab
        merges = [(a, b) for a, b in vocab.merges if a in ids and b in ids and a + b in ids]
        try:
            model = models.BPE(ids, merges, ignore_merges=ignore)
        except Exception as err:
            raise TokenizerError(f"cannot build BPE from the file's vocab and merges: {err}") from err
    tok = Tokenizer(model)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([split_pre_tokenizer(rules), byte_level])
    tok.decoder = decoders.ByteLevel()
    return tok


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Merges implied by SentencePiece scores: every split of a token into two tokens, best score first.

    llama.cpp merges the adjacent pair whose concatenation has the highest score (leftmost on ties);
    ranking merges by the merged token's score (then its id, then the left part's id) reproduces that.
    """
    ids = vocab.index or {t: i for i, t in enumerate(vocab.tokens)}
    assert vocab.scores is not None
    m, left, right = split_pairs(vocab.tokens, ids)
    n = len(vocab.tokens)
    rank = np.empty(n, dtype=np.int64)  # each token's place by (score descending, id)
    rank[np.lexsort((np.arange(n), -np.asarray(vocab.scores, dtype=np.float64)))] = np.arange(n)
    order = np.argsort(rank[m] * n + left)
    text = np.array(vocab.tokens, dtype=object)
    with gc_paused():  # ~500k new tuples: no cyclic-GC passes over them while they are made
        return list(zip(text[left[order]].tolist(), text[right[order]].tolist(), strict=True))


def build_spm(vocab: Vocab) -> Tokenizer | SentencePieceBPE:
    """SentencePiece-style BPE on text whose spaces the caller already turned into '▁': sentencepiece's
    own encoder where it reproduces llama.cpp, else (and for texts it cannot) a `tokenizers` BPE."""
    fast = sentencepiece_bpe(vocab, lambda: build_spm_merges(vocab))
    return fast if fast is not None else build_spm_merges(vocab)


def build_spm_merges(vocab: Vocab) -> Tokenizer:
    """SentencePiece-style BPE as a `tokenizers` BPE with every two-piece split ranked as a merge."""
    ids = vocab.index or {t: i for i, t in enumerate(vocab.tokens)}
    has_bytes = all(f"<0x{b:02X}>" in ids for b in range(256))
    unk = vocab.tokens[vocab.special["unknown"]] if "unknown" in vocab.special else None
    try:
        with gc_paused():
            model = models.BPE(ids, spm_merges(vocab), byte_fallback=has_bytes, unk_token=unk)
    except Exception as err:
        raise TokenizerError(f"cannot build SentencePiece BPE from the file's vocab: {err}") from err
    return Tokenizer(model)


def build_utf8_bpe(vocab: Vocab) -> Tokenizer:
    """Gemma 4: BPE with the file's merges over raw UTF-8 text whose spaces the caller turned into '▁' and
    cut into lines and newline runs (unknown chars fall back to <0xXX> byte tokens)."""
    ids = vocab.index or {t: i for i, t in enumerate(vocab.tokens)}
    has_bytes = all(f"<0x{b:02X}>" in ids for b in range(256))
    try:
        with gc_paused():
            model = models.BPE(ids, vocab.merges, byte_fallback=has_bytes)
    except Exception as err:
        raise TokenizerError(f"cannot build BPE from the file's vocab and merges: {err}") from err
    return Tokenizer(model)


def build(vocab: Vocab) -> Tokenizer | SentencePieceBPE:
    if vocab.model == "gemma4":
        return build_utf8_bpe(vocab)
    return build_bpe(vocab) if vocab.model == "gpt2" else build_spm(vocab)
