"""SentencePiece BPE through the `sentencepiece` library, from a GGUF vocabulary's pieces and scores.

llama.cpp's SentencePiece tokenizer (tokenizer.ggml.model = llama) is sentencepiece's BPE encoder: the
text's characters are merged pairwise, the pair whose concatenation is a piece with the highest score
first (leftmost on ties), leftover characters fall back to <0xXX> byte pieces. Handing sentencepiece the
vocabulary as a serialized ModelProto (built here with array operations: ~4.7 MB for Gemma's 262k
pieces) loads in ~0.15 s, where a `tokenizers` BPE needs every two-piece split of every piece ranked as a
merge (~515k for Gemma; ~2-3 s to find and load).

Piece types: every piece is NORMAL for sentencepiece (llama.cpp merges into control, user-defined and
unused pieces alike; a USER_DEFINED piece would be matched whole in the input, which GGUFTokenizer's
special-token partition does instead), except the <0xXX> pieces (BYTE, for the fallback) and the unknown
piece (UNKNOWN; sentencepiece needs one). Those two kinds are never the result of a merge in
sentencepiece, but they are in llama.cpp when their text splits into two pieces: texts holding such a
piece's text go to the `tokenizers` model instead, built on first need (none of Gemma 3's do).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

try:  # imported with the module (the loader's thread), not on the tokenizer's build thread
    import sentencepiece
except ImportError:  # a dependency; without it SentencePiece vocabularies use the `tokenizers` model
    sentencepiece = None

from orcd.tokenizer.vocab import BYTE, UNKNOWN, Vocab

_MAX_VARINT2 = 1 << 14  # lengths below this take at most two varint bytes
_NORMALIZER = b"\x0a\x08identity\x18\x00\x20\x00\x28\x00"  # name, no dummy prefix / space edits


class Encoding(NamedTuple):
    ids: list[int]  # what GGUFTokenizer reads of a `tokenizers` Encoding


class SentencePieceBPE:
    """encode / encode_batch_fast as `tokenizers.Tokenizer` offers them (ids only)."""

    def __init__(self, processor: Any, guard: re.Pattern | None, fallback: Callable[[], Any]):
        self._sp = processor
        self._guard = guard  # texts it matches are encoded by the fallback model
        self._make_fallback = fallback
        self._fallback: Any = None

    def _other(self) -> Any:
        if self._fallback is None:
            self._fallback = self._make_fallback()
        return self._fallback

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        if self._guard is not None and self._guard.search(text):
            return Encoding(self._other().encode(text, add_special_tokens=False).ids)
        return Encoding(self._sp.encode(text, out_type=int))

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = False) -> list[Encoding]:
        if self._guard is not None and any(self._guard.search(t) for t in texts):
            return [self.encode(t) for t in texts]
        return [Encoding(ids) for ids in self._sp.encode(texts, out_type=int)]


def sentencepiece_bpe(vocab: Vocab, fallback: Callable[[], Any]) -> SentencePieceBPE | None:
    """The vocabulary as sentencepiece BPE, or None where that cannot reproduce llama.cpp (no
    `sentencepiece`, no byte pieces or unknown piece, empty or duplicate or very long pieces)."""
    if sentencepiece is None:
        return None
    tokens, types = vocab.tokens, vocab.types
    unk = vocab.special.get("unknown")
    index = vocab.index or {t: i for i, t in enumerate(tokens)}
    if (unk is None or vocab.scores is None or len(index) != len(tokens) or "" in index
            or not all(f"<0x{b:02X}>" in index for b in range(256))):
        return None
    reserved = [i for i, ty in enumerate(types) if ty == BYTE] + [unk]
    if any(types[index[f"<0x{b:02X}>"]] != BYTE for b in range(256)):
        return None
    proto = model_proto(tokens, vocab.scores, types, unk)
    if proto is None:
        return None
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(proto)
    formable = [tokens[i] for i in reserved if _splits_in_two(tokens[i], index)]
    guard = re.compile("|".join(map(re.escape, formable))) if formable else None
    return SentencePieceBPE(processor, guard, fallback)


def _splits_in_two(text: str, index: dict[str, int]) -> bool:
    return any(text[:k] in index and text[k:] in index for k in range(1, len(text)))


def model_proto(tokens: list[str], scores: Any, types: list[int], unk: int) -> bytes | None:
    """Serialized sentencepiece ModelProto: pieces (text, score, type), BPE with byte fallback, identity
    normalizer. None if a piece is too long for two-byte varint lengths."""
    data = "".join(tokens).encode("utf-8", "surrogatepass")
    size = _utf8_sizes(tokens)  # bytes per piece
    kind = np.ones(len(tokens), dtype=np.int64)  # NORMAL
    kind[np.asarray(types) == BYTE] = BYTE
    kind[unk] = UNKNOWN
    typed = kind != 1
    v_size = 1 + (size >= 128)
    body = 1 + v_size + size + 5 + 2 * typed  # piece field, score field, type field if not NORMAL
    if len(tokens) and (int(size.max()) >= _MAX_VARINT2 or int(body.max()) >= _MAX_VARINT2):
        return None
    v_body = 1 + (body >= 128)
    rec = 1 + v_body + body
    start = np.zeros(len(tokens), dtype=np.int64)
    np.cumsum(rec[:-1], out=start[1:])
    out = np.zeros(int(rec.sum()), dtype=np.uint8)
    out[start] = 0x0A  # ModelProto.pieces (field 1, length-delimited)
    p = _put_varint(out, start + 1, body, v_body)
    out[p] = 0x0A  # SentencePiece.piece (field 1)
    p = _put_varint(out, p + 1, size, v_size)
    text_start = np.zeros(len(tokens), dtype=np.int64)
    np.cumsum(size[:-1], out=text_start[1:])
    out[np.repeat(p - text_start, size) + np.arange(len(data))] = np.frombuffer(data, dtype=np.uint8)
    p = p + size
    out[p] = 0x15  # SentencePiece.score (field 2, fixed32 float)
    score = np.asarray(scores, dtype="<f4").view(np.uint8).reshape(-1, 4)
    out[p[:, None] + np.arange(1, 5)] = score
    out[p[typed] + 5] = 0x18  # SentencePiece.type (field 3, varint)
    out[p[typed] + 6] = kind[typed]
    trainer = b"\x18\x02" + b"\x98\x02\x01" + b"\xc0\x02" + _varint(unk)  # BPE, byte_fallback, unk_id
    return (out.tobytes() + b"\x12" + _varint(len(trainer)) + trainer
            + b"\x1a" + _varint(len(_NORMALIZER)) + _NORMALIZER)


def _utf8_sizes(tokens: list[str]) -> np.ndarray:
    """UTF-8 byte length of each token (surrogates, as surrogatepass writes them, 3 bytes)."""
    codes = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    per_char = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    n_chars = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    ends = np.cumsum(n_chars)
    total = np.concatenate([[0], np.cumsum(per_char, dtype=np.int64)])
    return total[ends] - total[ends - n_chars]


def _put_varint(out: np.ndarray, at: np.ndarray, value: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Write value (< 2**14) as a 1- or 2-byte varint at each position; returns the positions after."""
    two = width == 2
    out[at] = (value & 0x7F) | (two * 0x80)
    out[at[two] + 1] = value[two] >> 7
    return at + width


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
