"""GGUFTokenizer: llama.cpp-equal encode/decode over a `tokenizers` model built from GGUF metadata.

Encoding follows llama.cpp's `llama_vocab::tokenize`:
1. special-token partition: control/unknown tokens (only with parse_special) and user-defined tokens
   (always) are cut out of the text, longest token first, honouring per-token rstrip (phi-3);
2. every remaining text fragment goes through the `tokenizers` model (byte-level BPE with the file's
   pre-tokenizer, or SentencePiece BPE on text with ' ' -> '▁' and a '▁' prefix at the start and after
   each special token);
3. BOS/EOS only when add_special is asked for and the file's add_bos/add_eos say so.

Decoding concatenates each token's bytes (no clean-up of spaces, so streamed and full text agree) and
decodes UTF-8 with U+FFFD for invalid bytes. SentencePiece vocabularies drop the prefix space of the
first token (like llama.cpp's detokenize) unless `strip_leading_space=False`.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any

from orcd.errors import TemplateError, TokenizerError
from orcd.tokenizer.build import build, bytes_to_unicode
from orcd.tokenizer.chat import ChatTemplate
from orcd.tokenizer.chat_spans import MESSAGE_TEXTS
from orcd.tokenizer.detokenizer import StreamingDetokenizer
from orcd.tokenizer.vocab import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, Vocab, read_vocab

_C_SPACE = " \t\n\v\f\r"  # C isspace(), which llama.cpp's rstrip uses
# chars below U+0100 that byte-level BPE never uses for a byte; a token holding one takes the slow path
_RAW_HIGH = re.compile("[\x7f-\xa0\xad]")
_CHUNK = 16384  # chars per part when a long text is encoded in parallel
_SAFE_CUT = re.compile(r"(?<=[^\s]) (?=[A-Za-z])")
_SPM_CUT = re.compile("(?<=[^▁])▁(?=[A-Za-z])")
_LINE_RUNS = re.compile("[^\n]+|\n+")


class PieceTable:
    """Bytes each token decodes to (control/unknown/user-defined tokens: their text), computed the first
    time a token is decoded: the whole table (150k entries) would cost ~0.15 s of every load, and a
    generation only ever decodes a few thousand distinct tokens (~1 us each, then a list lookup)."""

    def __init__(self, vocab: Vocab):
        self._v = vocab
        self._known: list[bytes | None] = [None] * len(vocab.tokens)
        if vocab.model == "gpt2":
            self._byte_of = {c: b for b, c in bytes_to_unicode().items()}
            self._to_latin1 = str.maketrans({c: chr(b) for c, b in self._byte_of.items()})

    def __len__(self) -> int:
        return len(self._known)

    def __getitem__(self, i: int) -> bytes:
        piece = self._known[i]
        if piece is None:
            piece = self._known[i] = self._piece(self._v.tokens[i], self._v.types[i])
        return piece

    @property
    def computed(self) -> int:
        """How many entries have been computed so far."""
        return len(self._known) - self._known.count(None)

    def __iter__(self) -> Iterator[bytes]:
        return map(self.__getitem__, range(len(self._known)))

    def _piece(self, text: str, kind: int) -> bytes:
        if kind in (CONTROL, UNKNOWN, USER_DEFINED):
            return text.encode()
        if self._v.model == "gpt2":
            if kind != NORMAL:
                return b""
            if _RAW_HIGH.search(text) is None:  # fast path: every char maps to one byte
                with contextlib.suppress(UnicodeEncodeError):
                    return text.translate(self._to_latin1).encode("latin-1")
            return b"".join(bytes([self._byte_of[c]]) if c in self._byte_of else c.encode() for c in text)
        if kind == NORMAL:
            return text.replace("▁", " ").encode()
        if kind == BYTE and len(text) == 6 and text.startswith("<0x"):
            return bytes([int(text[3:5], 16)])
        return b""


class GGUFTokenizer:
    def __init__(self, vocab: Vocab):
        self._hf = build(vocab)
        # the merges now live in the `tokenizers` model: dropping the ~150k tuples here saves ~15 MB and
        # the ~15 ms young-generation GC pass over them right after load_model turns the GC back on
        vocab = self.vocab = dataclasses.replace(vocab, merges=[])
        self._spm = vocab.model in ("llama", "gemma4")  # text gets '▁' for spaces
        self._lines = vocab.model == "gemma4"  # BPE per line and per newline run (llama.cpp's Gemma 4)
        # a '▁' after another char in some token (its leading '▁'s stripped, any '▁' left is such a one)
        self._spm_cuttable = self._spm and "▁" not in "".join(map(str.lstrip, vocab.tokens, repeat("▁")))
        self.pieces = PieceTable(vocab)
        types = vocab.types
        marked = [i for i, t in enumerate(types) if t != NORMAL]  # one pass; NORMAL is ~all of a vocab
        self.hidden_ids = frozenset(i for i in marked if types[i] in (CONTROL, UNKNOWN))  # skip_special
        # special-token partition candidates, longest text first (llama.cpp cache_special_tokens)
        order = sorted((i for i in marked if types[i] in (CONTROL, UNKNOWN, USER_DEFINED)),
                       key=lambda i: -len(vocab.tokens[i]))
        self._split_all = [(vocab.tokens[i], i) for i in order]
        self._split_user = [(vocab.tokens[i], i) for i in order if vocab.types[i] == USER_DEFINED]
        self._token_chars = {i: frozenset(vocab.tokens[i]) for i in order}
        self.bos_id: int | None = vocab.special.get("bos")
        self.eos_id: int | None = vocab.special.get("eos")
        self.eot_id: int | None = vocab.special.get("eot")
        self.eog_ids: frozenset[int] = vocab.eog_ids
        self.add_bos: bool = vocab.add_bos and self.bos_id is not None
        self.add_eos: bool = vocab.add_eos and self.eos_id is not None
        self.vocab_size: int = len(vocab.tokens)
        self._template = ChatTemplate(vocab.chat_template, self._token_text(self.bos_id),
                                      self._token_text(self.eos_id))
        self.has_chat_template: bool = vocab.chat_template is not None

    def _token_text(self, i: int | None) -> str:
        return self.vocab.tokens[i] if i is not None else ""

    def token_text(self, i: int) -> str:
        """The token's text as stored in the file (byte-level or '▁' form)."""
        return self.vocab.tokens[i]

    # -- encoding ---------------------------------------------------------------------------------
    def _partition(self, text: str, parse_special: bool,
                   protected: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int] | int]:
        """Cut special tokens out of text, llama.cpp's way: for each candidate token, longest first,
        split every raw fragment at its occurrences. Fragments are (start, end) spans of `text`; ints
        are token ids. Control tokens overlapping a `protected` span (message content) are not matched."""
        frags: list[tuple[int, int] | int] = [(0, len(text))]
        chars = set(text)  # cheap filter before a substring scan per candidate (thousands in some vocabs)
        for tok, tid in self._split_all if parse_special else self._split_user:
            if not self._token_chars[tid] <= chars or tok not in text:
                continue
            guard = protected if self.vocab.types[tid] != USER_DEFINED else ()
            rstrip = tid in self.vocab.rstrip_ids
            new: list[tuple[int, int] | int] = []
            for frag in frags:
                if isinstance(frag, int):
                    new.append(frag)
                    continue
                pos, end = frag
                search = pos
                while (m := text.find(tok, search, end)) >= 0:
                    if _overlaps(guard, m, m + len(tok)):
                        search = m + 1
                        continue
                    if m > pos:
                        new.append((pos, m))
                    new.append(tid)
                    pos = m + len(tok)
                    while rstrip and pos < end and text[pos] in _C_SPACE:
                        pos += 1
                    search = pos
                if pos < end:
                    new.append((pos, end))
            frags = new
        return frags

    def _encode_text(self, pieces: list[str]) -> list[list[int]]:
        """ids per text piece. Long pieces are cut where no merge can reach across (byte-level BPE:
        a space after a non-space, before an ASCII letter, where every split rule starts a word;
        SentencePiece: the same '▁' when no token holds '▁' after another char), and the parts are
        encoded in parallel by `tokenizers`."""
        if not pieces:
            return []
        if self._lines:
            return [self._encode_lines(piece) for piece in pieces]
        cut = _SPM_CUT if self._spm else _SAFE_CUT
        if self._spm and not self._spm_cuttable:
            cut = None
        if len(pieces) == 1 and (cut is None or len(pieces[0]) <= _CHUNK):
            return [self._hf.encode(pieces[0], add_special_tokens=False).ids]
        if sum(map(len, pieces)) <= _CHUNK:  # a chat template's few short pieces: one by one, not through
            # the batch call's thread pool (140 -> 92 µs for a short chat turn on the 2-core dev box)
            return [self._hf.encode(piece, add_special_tokens=False).ids for piece in pieces]
        parts, owner = [], []
        for k, piece in enumerate(pieces):
            chunks = [piece] if cut is None else _chunks(piece, cut)
            parts.extend(chunks)
            owner.extend([k] * len(chunks))
        out: list[list[int]] = [[] for _ in pieces]
        for k, enc in zip(owner, self._hf.encode_batch_fast(parts, add_special_tokens=False), strict=True):
            out[k].extend(enc.ids)
        return out

    def _encode_lines(self, piece: str) -> list[int]:
        """Gemma 4 (llama.cpp): each line and each run of newlines is merged on its own, and a run of
        newlines that is a token is that token."""
        parts = _LINE_RUNS.findall(piece)
        ids = [self.vocab.index.get(p) if p[0] == "\n" else None for p in parts]
        todo = [p for p, i in zip(parts, ids, strict=True) if i is None]
        encoded = iter(self._hf.encode_batch_fast(todo, add_special_tokens=False) if todo else ())
        return [t for i in ids for t in ([i] if i is not None else next(encoded).ids)]

    def encode(self, text: str, add_special: bool = False, parse_special: bool = False,
               protected: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Text -> ids. `protected`: sorted, disjoint (start, end) spans where control tokens are
        never matched even with parse_special (used for chat message contents)."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode() needs a str, got {type(text).__name__}")
        frags = self._partition(text, parse_special, protected) if text else []
        raw: list[str] = []
        prev_special = True  # SentencePiece adds the '▁' prefix at the start and after special tokens
        for frag in frags:
            if isinstance(frag, int):
                prev_special = True
                continue
            piece = text[frag[0]:frag[1]]
            if self._spm:
                piece = (" " + piece if prev_special and self.vocab.add_space_prefix else piece)
                piece = piece.replace(" ", "▁")
            raw.append(piece)
            prev_special = False
        encoded = iter(self._encode_text(raw))
        ids: list[int] = [self.bos_id] if add_special and self.add_bos else []  # type: ignore[list-item]
        for frag in frags:
            if isinstance(frag, int):
                ids.append(frag)
            else:
                ids.extend(next(encoded))
        if add_special and self.add_eos:
            ids.append(self.eos_id)  # type: ignore[arg-type]
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        """A raw prompt: BOS/EOS as the file says, special-token text in it stays plain text."""
        return self.encode(text, add_special=True, parse_special=False)

    # -- decoding ---------------------------------------------------------------------------------
    def check_ids(self, ids: Sequence[int]) -> None:
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise TokenizerError(f"token id {i!r} is outside the vocabulary (size {self.vocab_size})")

    def piece_bytes(self, i: int, skip_special: bool = False) -> bytes:
        return b"" if skip_special and i in self.hidden_ids else self.pieces[i]

    def decode(self, ids: Sequence[int], skip_special: bool = False, strip_leading_space: bool = True) -> str:
        self.check_ids(ids)
        data = [self.piece_bytes(i, skip_special) for i in ids]
        if data and strip_leading_space and self.vocab.add_space_prefix and data[0][:1] == b" ":
            data[0] = data[0][1:]
        return b"".join(data).decode("utf-8", errors="replace")

    def detokenizer(self, skip_special: bool = False,
                    strip_leading_space: bool = False) -> StreamingDetokenizer:
        """Incremental decoder. Default keeps the first token's leading space: generated text continues
        a prompt (" Paris"). With strip_leading_space=True the joined output equals `decode(ids)`."""
        strip = strip_leading_space and self.vocab.add_space_prefix
        return StreamingDetokenizer(self, skip_special=skip_special, strip_leading_space=strip)

    # -- chat -------------------------------------------------------------------------------------
    def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                    **template_vars: Any) -> str:
        return self._template.render(messages, add_generation_prompt, **template_vars)

    def encode_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                    **template_vars: Any) -> list[int]:
        """Rendered chat -> ids. Special tokens are parsed in template markup only; message contents
        are tokenized as plain text. BOS is added only if the file asks and the template did not."""
        text, contents = self._template.render_spans(messages, add_generation_prompt, **template_vars)
        if contents is None:  # the template rewrote contents: safe only if none holds control-token text
            texts = [str(m[key]) for m in messages if isinstance(m, dict) for key in MESSAGE_TEXTS
                     if m.get(key) is not None]
            controls = [tok for tok, tid in self._split_all if self.vocab.types[tid] != USER_DEFINED]
            if any(tok in t for tok in controls for t in texts):
                raise TemplateError("a message holds special-token text and this chat template rewrites "
                                    "message contents, so it cannot be kept as plain text")
            contents = []
        ids = self.encode(text, add_special=False, parse_special=True, protected=contents)
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)  # type: ignore[arg-type]
        return ids


def _chunks(text: str, cut: re.Pattern) -> list[str]:
    """Cut text into ~_CHUNK-char parts at matches of `cut` (places no merge can reach across)."""
    out, start = [], 0
    while len(text) - start > _CHUNK:
        m = cut.search(text, start + _CHUNK)
        if m is None:
            break
        out.append(text[start:m.start()])
        start = m.start()
    out.append(text[start:])
    return out


def _overlaps(spans: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Does [start, end) overlap any of the sorted, disjoint spans?"""
    k = bisect.bisect_right(spans, (start, float("inf"))) - 1  # last span starting at or before start
    if k >= 0 and spans[k][1] > start:
        return True
    return k + 1 < len(spans) and spans[k + 1][0] < end


def load_tokenizer(metadata: dict[str, Any]) -> GGUFTokenizer:
    """Build the tokenizer from a GGUF file's metadata (`orcd.gguf.open_gguf(path).metadata`)."""
    return GGUFTokenizer(read_vocab(metadata))
