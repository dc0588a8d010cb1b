"""llguidance's tokenizer for an orcd tokenizer, in one of two kinds.

- native: built from the JSON of orcd's own `tokenizers` model (byte-level BPE vocabularies), orcd's
  control tokens added to it as special tokens. llguidance encodes a grammar's forced text (JSON keys and
  punctuation) itself, in Rust, and never calls into Python, so its parallel executor (LLExecutor) is not
  serialized by the GIL (bench/structured/executor_scaling.py).
- view: every token's bytes and a callback into orcd's encode (TokenizerView). Any vocabulary.

The two give equal masks (tests/structured/test_lltokenizers.py walks them mask for mask) except on text
that spells a control token: `tokenizers` matches added tokens inside any text, orcd's encode does not. A
grammar holding a control token's text is therefore compiled on the view (GrammarBackend.lltok_for).
User-defined tokens (qwen2's [PAD151646]...) are added as plain added tokens: `tokenizers` cuts them out
of any text, as orcd's encode does. native_tokenizer refuses (None) where parity is not assured:
SentencePiece vocabularies (Gemma's merges run in sentencepiece, not `tokenizers`), unknown tokens, and
any token whose bytes or special mark llguidance reads differently from orcd.
"""

from __future__ import annotations

import llguidance
from tokenizers import AddedToken, Tokenizer

from orcd.tokenizer.vocab import CONTROL, UNKNOWN, USER_DEFINED

SPECIAL = b"\xff"  # llguidance's marker for a special token's bytes (matched only by name, never as text)
ENCODED_MAX = 4096  # texts whose ids a TokenizerView keeps


class TokenizerView:
    """What llguidance.LLTokenizer reads from a tokenizer (its TokenizerWrapper protocol): every token's
    bytes (control tokens marked special), EOS/BOS and an encode function."""

    is_tokenizer_wrapper = True

    def __init__(self, tok):
        types = tok.vocab.types
        self.tokens = [SPECIAL + tok.pieces[i] if types[i] == CONTROL else tok.pieces[i]
                       for i in range(tok.vocab_size)]
        self.special_token_ids = [i for i in range(tok.vocab_size) if types[i] == CONTROL]
        self.eos_token_id = tok.eos_id
        self.bos_token_id = tok.bos_id
        self._tok = tok
        self._seen: dict[str, tuple[int, ...]] = {}  # text -> its ids (__call__), up to _keep texts
        self._keep = ENCODED_MAX

    def __call__(self, text: str | bytes) -> list[int]:
        """text's token ids. llguidance asks for the forced bytes of a grammar (a JSON schema's keys and
        punctuation) again and again, a row at a time: each is encoded once (15-26 µs a call on the
        H200's host, ~35 calls a step for the real Gemma 3 at 64 streams; bench/results/s33/)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        ids = self._seen.get(text)
        if ids is None:
            ids = tuple(self._tok.encode(text))
            if len(self._seen) < self._keep:
                self._seen[text] = ids
        return list(ids)


def view_tokenizer(tok, eos: list[int], slices: list[str] | None) -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(TokenizerView(tok), eos_token=eos, slices=slices)


def native_tokenizer(tok, eos: list[int], slices: list[str] | None) -> llguidance.LLTokenizer | None:
    """llguidance's own tokenizer from orcd's byte-level BPE model (~1.6 s for qwen2's 152k tokens on a
    2-core CPU), or None where its masks could differ from the view's (module docstring)."""
    model = tok.merge_model
    types = tok.vocab.types
    if tok.vocab.model != "gpt2" or not isinstance(model, Tokenizer):
        return None
    if UNKNOWN in types:
        return None
    hf = Tokenizer.from_str(model.to_str())
    texts = tok.vocab.tokens
    hf.add_special_tokens([AddedToken(texts[i], special=True, normalized=False)
                           for i, t in enumerate(types) if t == CONTROL])
    # cut out of any text, as orcd's encode does (qwen2's [PAD151646]...)
    hf.add_tokens([AddedToken(texts[i], special=False, normalized=False)
                   for i, t in enumerate(types) if t == USER_DEFINED])
    lltok = llguidance.LLTokenizer(hf.to_str(), n_vocab=tok.vocab_size, eos_token=eos, slices=slices)
    return lltok if same_tokens(lltok, tok) else None


def same_tokens(lltok: llguidance.LLTokenizer, tok) -> bool:
    """Whether llguidance reads every token's bytes and special mark as it does through the view (~30 ms
    for 152k tokens). A token of byte 0xff (SPECIAL: byte-level BPE's 'ÿ', never in UTF-8 text) reads as
    a special token with no name either way."""
    if lltok.vocab_size != tok.vocab_size:
        return False
    types = tok.vocab.types
    for i in range(tok.vocab_size):
        piece = tok.pieces[i]
        marked = piece.startswith(SPECIAL)
        if lltok.is_special_token(i) != (types[i] == CONTROL or marked):
            return False
        if lltok.decode_bytes([i]) != (piece[1:] if marked else piece):
            return False
    return True


def control_texts(tok) -> list[str]:
    """The texts of the control tokens (those a native tokenizer matches inside forced text)."""
    texts = tok.vocab.tokens
    return [texts[i] for i, t in enumerate(tok.vocab.types) if t == CONTROL and texts[i]]
