"""SentencePiece vocabularies through sentencepiece's own BPE (orcd/tokenizer/spm_model.py): the same ids
as the `tokenizers` BPE built from every two-piece split (itself checked against llama.cpp's vectors),
on llama.cpp's SentencePiece vocabularies, a synthetic one with long and multi-byte pieces, and one whose
byte piece text is also formed by a merge (those texts go to the `tokenizers` model)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from tokenizer_testdata import Vocabs

from orcd.gguf import open_gguf
from orcd.tokenizer.build import build_spm, build_spm_merges
from orcd.tokenizer.spm_model import SentencePieceBPE, model_proto
from orcd.tokenizer.vocab import BYTE, CONTROL, NORMAL, UNKNOWN, Vocab, read_vocab

pytest.importorskip("sentencepiece")


def texts(seed: int, n: int = 400) -> list[str]:
    """Random '▁'-spaced text over ASCII, Cyrillic, CJK, emoji, tabs and newlines."""
    rng = random.Random(seed)
    pools = [range(32, 127), range(0x400, 0x460), range(0x4E00, 0x4E80), range(0x1F600, 0x1F640), [9, 10]]
    out = []
    for _ in range(n):
        s = "".join(chr(rng.choice(rng.choice(pools))) for _ in range(rng.randrange(1, 60)))
        out.append(s.replace(" ", "▁"))
    return out


def same_ids(vocab: Vocab, cases: list[str]) -> None:
    fast, slow = build_spm(vocab), build_spm_merges(vocab)
    assert isinstance(fast, SentencePieceBPE)
    for s in cases:
        assert fast.encode(s).ids == slow.encode(s, add_special_tokens=False).ids, s
    batch = [e.ids for e in fast.encode_batch_fast(cases)]
    assert batch == [e.ids for e in slow.encode_batch_fast(cases, add_special_tokens=False)]


def test_llama_cpp_sentencepiece_vocabularies(vocabs: Vocabs) -> None:
    for name in ("llama-spm", "phi-3"):
        vocab = read_vocab(open_gguf(vocabs.path(name)).metadata)
        same_ids(vocab, texts(1) + ["▁Hello▁world", "<0x41>▁<unk>▁<s>", "\n\n▁▁▁x"])


def synthetic(extra: list[str]) -> Vocab:
    """<unk>, <s>, 256 byte pieces, chars and random multi-char pieces (some over 128 bytes) + extra."""
    rng = random.Random(0)
    chars = list("ab▁é東🦙\n") + ["x" * 70]
    pieces = set(chars)
    for _ in range(2000):
        pieces.add("".join(rng.choice(chars[:-1]) for _ in range(rng.randint(2, 6))))
    normal = sorted(pieces - set(chars)) + chars + extra
    tokens = ["<unk>", "<s>"] + [f"<0x{b:02X}>" for b in range(256)] + normal
    types = [UNKNOWN, CONTROL] + [BYTE] * 256 + [NORMAL] * len(normal)
    scores = [0.0] * 258 + [-float(rng.randrange(0, 500)) for _ in normal]  # ties among pieces
    return Vocab(model="llama", pre="default", tokens=tokens, types=types, scores=scores, merges=[],
                 special={"unknown": 0, "bos": 1}, add_bos=True, add_eos=False, add_space_prefix=True,
                 chat_template=None, eog_ids=frozenset(), rstrip_ids=frozenset())


def test_synthetic_vocabulary_with_ties_long_and_multibyte_pieces() -> None:
    vocab = synthetic([])
    cases = ["".join(random.Random(i).choice("ab▁é東🦙\nxz") for _ in range(80)) for i in range(300)]
    same_ids(vocab, cases + ["x" * 140 + "ab"])


def test_a_byte_piece_formed_by_a_merge_goes_to_the_other_model() -> None:
    vocab = synthetic(["<0x", "41>", "<0", "41", "<", "0", "x", "4", "1", ">"])  # "<0x" + "41>" = "<0x41>"
    fast = build_spm(vocab)
    assert fast._guard is not None and fast._guard.search("a<0x41>b")
    assert fast.encode("a<0x41>b").ids[1] == vocab.tokens.index("<0x41>")  # merged, as llama.cpp does
    same_ids(vocab, ["a<0x41>b", "<0x41>", "ab<0x4", "<0x42>"])


def test_model_proto_round_trips_pieces_scores_and_types() -> None:
    import sentencepiece

    vocab = synthetic([])
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model_proto(vocab.tokens, vocab.scores, vocab.types, 0))
    assert sp.get_piece_size() == len(vocab.tokens)
    for i in (0, 1, 2, 257, 258, len(vocab.tokens) - 1):
        assert sp.id_to_piece(i) == vocab.tokens[i] and sp.get_score(i) == vocab.scores[i]
    assert sp.is_unknown(0) and sp.is_byte(2) and not sp.is_control(1)  # <s>: NORMAL for sentencepiece


def test_unsuitable_vocabularies_keep_the_merges_model() -> None:
    vocab = synthetic([])
    keep = [0, 1, *range(258, len(vocab.tokens))]  # no byte pieces
    no_bytes = replace(vocab, tokens=[vocab.tokens[i] for i in keep], types=[vocab.types[i] for i in keep],
                       scores=[vocab.scores[i] for i in keep])
    assert not isinstance(build_spm(no_bytes), SentencePieceBPE)
    dup = replace(vocab, tokens=[*vocab.tokens, "ab"], types=[*vocab.types, NORMAL],
                  scores=[*vocab.scores, 0.0])
    assert not isinstance(build_spm(dup), SentencePieceBPE)
