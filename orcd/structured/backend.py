"""One llguidance tokenizer per orcd tokenizer, and the per-request matchers built on it."""

from __future__ import annotations

import threading
import time

import llguidance
import torch

from orcd.errors import RequestError
from orcd.tokenizer.vocab import CONTROL

SPECIAL = b"\xff"  # llguidance's marker for a special token's bytes (matched only by name, never as text)
STRING_CHAR = r'[^"\\\x00-\x1F\x7F]'  # one character of JSON string content that needs no escape


def content_slices(lengths) -> tuple[str, ...]:
    """llguidance's default tokenizer slices plus one of JSON string content of 1..k characters for each k.

    A mask walks the vocabulary's token trie, except for the slices (groups of tokens) that the lexer's
    state allows whole, which are or-ed in at once; a slice applies where every one of its tokens is a
    prefix of what the current lexeme can still match (llguidance's slicer: regex containment), so the
    mask is the same with any slices, only its cost changes. The default content slices are 1-10, 1-30 and
    any number of characters: inside a string with maxLength, with fewer than 10 characters left, none
    applies and every token is walked (1.7-3.3 ms per row on qwen2's 152k vocabulary, 2-core CPU)."""
    extra = [f"{STRING_CHAR}{{1,{k}}}" for k in sorted(set(lengths) - {10, 30}, reverse=True)]
    return tuple(llguidance.LLTokenizer.general_slices()) + tuple(extra)


# bench/results/mask_fill_bounded_cpu.md (qwen2's vocabulary, 2-core CPU): a row's fill in a bounded schema
# 16-39 % cheaper (64 rows: 30.6 -> 24.2 ms), plain unchanged; llguidance's tokenizer holds ~94 MB instead
# of ~51; 13 slices (1..9, 12, 15, 20, 25) were no faster and held ~152 MB
MASK_SLICES = content_slices((20, 15, 8, 6, 4))


ENCODED_MAX = 4096  # texts whose ids a _TokenizerView keeps


class _TokenizerView:
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


def eos_ids(tok) -> list[int]:
    """The tokens that end a generation (the tokenizer's EOS first), for the grammar's end."""
    first = [tok.eos_id] if tok.eos_id is not None else []
    return first + sorted(set(tok.eog_ids) - set(first))


class Matcher:
    """One request's grammar state: which tokens may come next; advanced with each generated token.

    consume() only records the token: the next GrammarBackend.fill() applies it before computing the mask,
    on the CPU while the device runs the forward pass (the engine appends sampled tokens between steps,
    where nothing else overlaps). Reading `m` or `done` applies what is pending first, so callers never
    see a matcher behind its tokens."""

    def __init__(self, backend: GrammarBackend, grammar: str):
        self.backend = backend
        self._m = llguidance.LLMatcher(backend.lltok, grammar, log_level=0)
        self.pending: list[int] = []  # tokens consumed but not yet applied, in order
        self.rejected = False  # the grammar rejected this row's unmasked token at its last check (guide.py)
        self.fill_s = 0.0  # seconds its last mask took (inside a maxLength string: the whole vocabulary)

    def consume(self, token_id: int) -> None:
        """Advance past a sampled token (applied lazily). A token the mask forbade puts the matcher in
        its error state, after which only EOS is allowed (the request ends)."""
        self.pending.append(token_id)

    def flush(self) -> None:
        """Apply the pending tokens one by one; tokens after the grammar stopped are ignored."""
        for t in self.pending:
            if not self._m.is_stopped():
                self._m.consume_token(t)
        self.pending.clear()

    @property
    def m(self) -> llguidance.LLMatcher:
        """The llguidance matcher, up to date with every consumed token."""
        self.flush()
        return self._m

    @property
    def done(self) -> bool:
        return self.m.is_stopped() or self.m.is_error()

    def quick_check(self, token_id: int) -> bool | None:
        """Whether the mask GrammarBackend.fill() would give now has `token_id`'s bit set, without
        computing it (llguidance walks the token's bytes: ~5-15 µs); None where only the mask can tell:
        - where the grammar forces the next bytes (a key, a tool's name), the mask allows only their
          canonical first token, while validate_tokens takes any token spelling a prefix of them;
        - once the grammar has stopped, validate_tokens refuses EOS, which the mask allows.
        Checked against the mask for every token of random walks (tests/structured/test_guide.py)."""
        if not 0 <= token_id < self.backend.vocab_size:
            return False
        if self.m.validate_tokens([token_id]) != 1:
            return None if token_id in self.backend.eos_ids else False
        return None if self._m.compute_ff_bytes() else True

    def allows(self, token_id: int) -> bool:
        """Whether the mask GrammarBackend.fill() would give now has `token_id`'s bit set (quick_check,
        else the mask)."""
        quick = self.quick_check(token_id)
        if quick is not None:
            return quick
        bitmask = self.backend.fill([self])
        return bool((int(bitmask[0, token_id // 32]) >> (token_id % 32)) & 1)


class GrammarBackend:
    """llguidance's tokenizer for one orcd tokenizer (built on first use: ~0.7 s for a 152k vocab), the
    grammar check that needs it, matchers and the batch's mask.

    check_first (default): the sampler draws each constrained row from its unmasked logits and computes
    a row's mask only where the grammar rejects that token, or where the row needs it before sampling
    (orcd.structured.guide); False: every constrained row's mask before sampling (the path before,
    kept for bench/structured/mask_cost.py to compare). mask_ahead (default, with check_first): rows
    whose mask was filled while the device ran are masked before the draw, the others checked; False:
    every row without top-k / top-p / min-p is checked (session 8's check first)."""

    def __init__(self, tokenizer, check_first: bool = True, mask_ahead: bool = True,
                 slices: tuple[str, ...] | None = MASK_SLICES):
        """slices: llguidance's tokenizer slices (content_slices); None: llguidance's defaults.

        Masks are filled one row after another on the caller's thread. Threads were slower on both hosts
        measured: on the H100's, 64 rows walking valid JSON filled in 2.96 ms one by one, 1.71 ms on a
        Python pool of 4 threads, 4.09 ms on 8 (bounded: 7.85, 7.10, 6.32); on the H200's (session 34,
        bench/results/s34/native_executor/), 0.94 ms one by one against 2.2 and 3.5 ms on pools of 4 and
        8 threads and 1.9-5.8 ms through llguidance's LLExecutor on 4-16 threads (plain schema; also
        slower with llguidance's native tokenizer, which never calls Python)."""
        self.tokenizer = tokenizer
        self.check_first = check_first
        self.mask_ahead = mask_ahead
        self.slices = slices
        self._lltok: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self.eos_ids = eos_ids(tokenizer)

    @property
    def lltok(self) -> llguidance.LLTokenizer:
        with self._lock:  # validate() runs on request threads, matchers are made on the engine's
            if self._lltok is None:
                slices = None if self.slices is None else list(self.slices)
                self._lltok = llguidance.LLTokenizer(_TokenizerView(self.tokenizer), eos_token=self.eos_ids,
                                                     slices=slices)
            return self._lltok

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def check(self, grammar: str, param: str = "response_format") -> None:
        """RequestError naming `param` when the grammar does not compile against this vocabulary."""
        err = llguidance.LLMatcher.validate_grammar(grammar, self.lltok)
        if err:
            raise RequestError(f"{param}: the grammar does not compile: {err.strip()}", param=param)

    def matcher(self, grammar: str) -> Matcher:
        return Matcher(self, grammar)

    def fill(self, matchers: list[Matcher], pin: bool = False) -> torch.Tensor:
        """Allowed-token bitmask [k, ceil(vocab / 32)] int32 on the CPU (pinned when `pin`, so it uploads
        without a staging copy), row i for matchers[i], after applying their pending tokens. A row with
        nothing allowed (a matcher in its error state) allows the EOS tokens only, so the request ends
        instead of sampling from an empty set.

        Through fill_rows: one matcher after another on this thread (threads were slower: __init__)."""
        bitmask = torch.zeros((len(matchers), self.words), dtype=torch.int32, pin_memory=pin)
        self.fill_rows(matchers, bitmask, list(range(len(matchers))))
        self.eos_if_empty(bitmask)
        return bitmask

    def fill_rows(self, matchers: list[Matcher], bitmask: torch.Tensor, slots: list[int]) -> None:
        """fill_row(matchers[j], bitmask, slots[j]) for each j, one after another."""
        for m, j in zip(matchers, slots, strict=True):
            self.fill_row(m, bitmask, j)

    @property
    def words(self) -> int:
        """int32 words of one bitmask row."""
        return (self.vocab_size + 31) // 32

    def fill_row(self, m: Matcher, bitmask: torch.Tensor, i: int) -> None:
        """Row i of a contiguous bitmask [k, words] int32 <- m's allowed tokens, after applying its pending
        tokens (without fill()'s EOS rule: eos_if_empty); every word of the row is written, whatever it
        held (tests/structured/test_guide.py). Records the time in m.fill_s."""
        t0 = time.perf_counter()
        m.flush()
        m._m.unsafe_compute_mask_ptr(bitmask.data_ptr() + 4 * self.words * i, 4 * self.words)
        m.fill_s = time.perf_counter() - t0

    def eos_if_empty(self, bitmask: torch.Tensor, rows: list[int] | None = None) -> None:
        """Rows of `bitmask` (CPU; those in `rows`, default all) with nothing allowed (a matcher in its
        error state) allow the EOS tokens. Reads only those rows (numpy: ~1 µs per 152k-token row)."""
        words = bitmask.numpy()
        rows = list(range(words.shape[0])) if rows is None else rows
        if not rows:
            return
        if rows == list(range(rows[0], rows[0] + len(rows))):  # GuidedStep's slots: a view, no copy
            block = words[rows[0]: rows[0] + len(rows)]
        else:
            block = words[rows]  # a copy (64 of Gemma's 262k-token rows: ~0.5 ms on this workspace)
        nonempty = block.any(axis=1).tolist()
        for i in (r for r, ok in zip(rows, nonempty, strict=True) if not ok):
            for t in self.eos_ids:
                words[i, t // 32] |= _bit(t % 32)  # numpy view of the bitmask's memory


def _bit(j: int) -> int:
    """Bit j of an int32 word as a Python int that fits int32 (bit 31 is the sign bit)."""
    return (1 << j) - (1 << 32) if j == 31 else 1 << j
