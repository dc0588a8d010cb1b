"""Streaming detokenizer: one token id in, the newly complete UTF-8 text out.

A character split across tokens (byte-level BPE or SentencePiece <0xNN> byte tokens) is held back until
its last byte arrives, so increments never hold a broken character. Invalid byte sequences become
U+FFFD exactly where a full decode puts them: the joined increments plus `flush()` equal
`tokenizer.decode(ids, ...)` with the same options.
"""

from __future__ import annotations

import codecs
from typing import Protocol


class PieceSource(Protocol):
    """What the detokenizer needs of GGUFTokenizer (typed structurally: no import of tokenizer.py)."""

    def check_ids(self, ids: tuple[int, ...]) -> None: ...

    def piece_bytes(self, token_id: int, skip_special: bool) -> bytes: ...


class StreamingDetokenizer:
    def __init__(self, tokenizer: PieceSource, skip_special: bool = False,
                 strip_leading_space: bool = False):
        self._tok = tokenizer
        self._skip_special = skip_special
        self._strip = strip_leading_space  # only the very first token's leading space (SentencePiece)
        self._first = True
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text made complete by this token ('' while a character is still partial)."""
        self._tok.check_ids((token_id,))
        data = self._tok.piece_bytes(token_id, self._skip_special)
        if self._first:
            self._first = False
            if self._strip and data[:1] == b" ":
                data = data[1:]
        return self._utf8.decode(data)

    def flush(self) -> str:
        """End of stream: any held-back partial character as U+FFFD; the decoder is reset."""
        return self._utf8.decode(b"", final=True)
