"""The llguidance tokenizers of one orcd tokenizer (lltokenizers.py), the per-request matchers built on them
and the batch's mask."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import llguidance
import torch

from orcd.errors import RequestError
from orcd.structured.lltokenizers import control_texts, native_tokenizer, view_tokenizer

PAR_MIN_S = 5e-4  # rows whose last masks took less in all are filled on the caller's thread
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
        self._m = llguidance.LLMatcher(backend.lltok_for(grammar), grammar, log_level=0)
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
    """llguidance's tokenizers for one orcd tokenizer (built on first use: ~1.6 s native, ~0.7 s the view,
    for qwen2's 152k tokens on a 2-core CPU), the grammar check that needs them, matchers and the batch's
    mask.

    check_first (default): the sampler draws each constrained row from its unmasked logits and computes
    a row's mask only where the grammar rejects that token, or where the row needs it before sampling
    (orcd.structured.guide); False: every constrained row's mask before sampling (the path before,
    kept for bench/structured/mask_cost.py to compare). mask_ahead (default, with check_first): rows
    whose mask was filled while the device ran are masked before the draw, the others checked; False:
    every row without top-k / top-p / min-p is checked (session 8's check first)."""

    def __init__(self, tokenizer, check_first: bool = True, mask_ahead: bool = True, fill_threads: int = 1,
                 slices: tuple[str, ...] | None = MASK_SLICES, native: bool = True,
                 executor_threads: int = 0):
        """slices: llguidance's tokenizer slices (content_slices); None: llguidance's defaults.
        native: llguidance's native tokenizer where the vocabulary allows (lltokenizers.py), else the view.
        executor_threads: fill a batch's masks (two rows or more) through llguidance's LLExecutor on that
        many threads; 0 (default): not.
        fill_threads: threads that fill a batch's masks (fill_rows); 1 (default): the caller's alone;
        0: min(8, CPUs). Off by default: on the H100 host, 64 rows walking valid JSON filled in 2.96 ms
        one by one, 1.71 ms on 4 threads, 4.09 ms on 8 (plain schema; bounded: 7.85, 7.10, 6.32 ms;
        bench/structured/fill_scaling.py --pools 4,8), and the engine's steps with the pool of 8 were not
        compared with it off on the same host."""
        self.tokenizer = tokenizer
        self.check_first = check_first
        self.mask_ahead = mask_ahead
        self.fill_threads = fill_threads or min(8, os.cpu_count() or 1)
        self.slices = slices
        self.native = native
        self.executor_threads = executor_threads
        self._executor_: llguidance.LLExecutor | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lltok: llguidance.LLTokenizer | None = None
        self._view: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self.eos_ids = eos_ids(tokenizer)
        self.is_native = False  # whether lltok is the native tokenizer (known once lltok is built)

    @property
    def lltok(self) -> llguidance.LLTokenizer:
        """The tokenizer grammars compile on: the native one where there is one, else the view."""
        with self._lock:  # validate() runs on request threads, matchers are made on the engine's
            if self._lltok is None:
                slices = None if self.slices is None else list(self.slices)
                native = native_tokenizer(self.tokenizer, self.eos_ids, slices) if self.native else None
                self.is_native = native is not None
                self._lltok = native or view_tokenizer(self.tokenizer, self.eos_ids, slices)
                self._controls = control_texts(self.tokenizer)
            return self._lltok

    @property
    def view(self) -> llguidance.LLTokenizer:
        """The view tokenizer (orcd's encode called back), for grammars holding a control token's text."""
        lltok = self.lltok
        if not self.is_native:
            return lltok
        with self._lock:
            if self._view is None:
                slices = None if self.slices is None else list(self.slices)
                self._view = view_tokenizer(self.tokenizer, self.eos_ids, slices)
            return self._view

    def lltok_for(self, grammar: str) -> llguidance.LLTokenizer:
        """lltok, or the view where the grammar's text holds a control token's (say a JSON const of
        "<|im_end|>"): the native tokenizer would spell that forced text with the control token."""
        lltok = self.lltok
        if self.is_native and any(c in grammar for c in self._controls):
            return self.view
        return lltok

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def check(self, grammar: str, param: str = "response_format") -> None:
        """RequestError naming `param` when the grammar does not compile against this vocabulary."""
        err = llguidance.LLMatcher.validate_grammar(grammar, self.lltok_for(grammar))
        if err:
            raise RequestError(f"{param}: the grammar does not compile: {err.strip()}", param=param)

    def matcher(self, grammar: str) -> Matcher:
        return Matcher(self, grammar)

    def fill(self, matchers: list[Matcher], pin: bool = False) -> torch.Tensor:
        """Allowed-token bitmask [k, ceil(vocab / 32)] int32 on the CPU (pinned when `pin`, so it uploads
        without a staging copy), row i for matchers[i], after applying their pending tokens. A row with
        nothing allowed (a matcher in its error state) allows the EOS tokens only, so the request ends
        instead of sampling from an empty set.

        Through fill_rows: one matcher after another on this thread where the rows' last masks were cheap.
        On the H100 host (16 cores), 64 rows walking valid JSON took 1.0 ms that way and 7.1 ms through
        llguidance's parallel executor (LLExecutor, 12 threads); 3.5 vs 8.2 ms with maxLength strings."""
        bitmask = torch.zeros((len(matchers), self.words), dtype=torch.int32, pin_memory=pin)
        self.fill_rows(matchers, bitmask, list(range(len(matchers))))
        self.eos_if_empty(bitmask)
        return bitmask

    def fill_rows(self, matchers: list[Matcher], bitmask: torch.Tensor, slots: list[int]) -> None:
        """fill_row(matchers[j], bitmask, slots[j]) for each j. Where their last masks (Matcher.fill_s)
        took PAR_MIN_S or more in all, on fill_threads threads (llguidance releases the GIL while it
        computes a mask; this thread waits), the slowest rows spread first over the least loaded threads:
        inside maxLength strings one mask walks the whole vocabulary (1-20 ms). With executor_threads,
        two rows or more go through llguidance's LLExecutor instead (_fill_native)."""
        if self.executor_threads and len(matchers) > 1:
            self._fill_native(matchers, bitmask, slots)
            return
        n = min(self.fill_threads, len(matchers))
        if n < 2 or sum(m.fill_s for m in matchers) < PAR_MIN_S:
            for m, j in zip(matchers, slots, strict=True):
                self.fill_row(m, bitmask, j)
            return
        loads: list[tuple[float, list]] = [(0.0, []) for _ in range(n)]
        for m, j in sorted(zip(matchers, slots, strict=True), key=lambda r: -r[0].fill_s):
            k = min(range(n), key=lambda t: loads[t][0])
            loads[k] = (loads[k][0] + m.fill_s, loads[k][1] + [(m, j)])
        pool = self._executor()
        for f in [pool.submit(self._fill_chunk, rows, bitmask) for _, rows in loads if rows]:
            f.result()

    def _fill_native(self, matchers: list[Matcher], bitmask: torch.Tensor, slots: list[int]) -> None:
        """The rows' masks in one LLExecutor call (its threads; the GIL released throughout, save for the
        view tokenizer's callbacks). Each row's fill_s is the call's time per row per thread."""
        with self._lock:
            if self._executor_ is None:
                self._executor_ = llguidance.LLExecutor(self.executor_threads)
        t0 = time.perf_counter()
        for m in matchers:
            m.flush()
        rows = [(m._m, j) for m, j in zip(matchers, slots, strict=True)]
        self._executor_.unsafe_compute_mask_ptr(rows, bitmask.data_ptr(), 4 * self.words, bitmask.shape[0])
        per = (time.perf_counter() - t0) * min(self.executor_threads, len(rows)) / len(rows)
        for m in matchers:
            m.fill_s = per

    def _fill_chunk(self, rows: list[tuple[Matcher, int]], bitmask: torch.Tensor) -> None:
        for m, j in rows:
            self.fill_row(m, bitmask, j)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.fill_threads, thread_name_prefix="orcd-mask")
            return self._pool

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
