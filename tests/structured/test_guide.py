"""Check first (orcd.structured.guide): rows drawn unmasked, masked only where the grammar rejects the token,
give the full mask's tokens -- greedy, seeded and unseeded sampling, penalties; top-k rows masked first --
whichever rows' masks were filled ahead. Real llguidance on the demo vocabulary (3,003 tokens)."""

from __future__ import annotations

import random

import pytest
import torch

from orcd.engine.sampling_params import SamplingParams as SP
from orcd.runner.sampler import SampleRow, sample
from orcd.structured.backend import GrammarBackend
from orcd.structured.grammars import json_schema_grammar, regex_grammar
from orcd.structured.mask import unpack_bitmask
from orcd.structured.tool_grammar import forced_tool_grammar

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


class CountingBackend(GrammarBackend):
    """A GrammarBackend that counts the masks it computes."""

    def __init__(self, tokenizer, check_first: bool = True, mask_ahead: bool = True):
        super().__init__(tokenizer, check_first, mask_ahead)
        self.rows_filled = 0

    def fill_row(self, m, bitmask, i):
        self.rows_filled += 1
        super().fill_row(m, bitmask, i)


@pytest.fixture(scope="module")
def tokenizer():
    from orcd.gguf import open_gguf
    from orcd.hub import DEMO_MODEL_PATH
    from orcd.tokenizer import load_tokenizer

    return load_tokenizer(open_gguf(DEMO_MODEL_PATH).metadata)


@pytest.fixture(scope="module")
def backends(tokenizer):
    """(check first, full mask first) on one tokenizer."""
    return CountingBackend(tokenizer), CountingBackend(tokenizer, check_first=False)


def grammars() -> list[str]:
    return [json_schema_grammar(SCHEMA, "s"), regex_grammar("(ab|c)+d", "r"),
            forced_tool_grammar(TOOLS, "required")]


def allowed_of(b: GrammarBackend, m) -> torch.Tensor:
    return unpack_bitmask(b.fill([m]), b.vocab_size)[0]


def walks_and_ends(b: GrammarBackend, tokenizer, steps: int) -> list:
    """[(matcher, steps)]: a fresh matcher of each grammar for `steps` steps, then a regex's stopped and
    error states for one."""
    stopped, error = (b.matcher(regex_grammar("(ab|c)+d", "r")) for _ in range(2))
    for t in tokenizer.encode("abd"):
        stopped.consume(t)
    error.consume(tokenizer.encode("z")[0])
    return [(b.matcher(g), steps) for g in grammars()] + [(stopped, 1), (error, 1)]


def test_allows_is_the_mask_bit_for_every_token(backends, tokenizer):
    """Random walks (now and then a forbidden token) and a regex's stopped and error states -- at every
    state Matcher.allows(t) equals the mask's bit for all 3,003 tokens."""
    b = backends[0]
    rng = random.Random(1)
    walks = walks_and_ends(b, tokenizer, 7)
    for m, steps in walks:
        for _ in range(steps):
            allowed = allowed_of(b, m).tolist()
            assert [m.allows(t) for t in range(b.vocab_size)] == allowed
            assert not m.allows(b.vocab_size) and not m.allows(-1)
            ok = [t for t, a in enumerate(allowed) if a]
            m.consume(rng.randrange(b.vocab_size) if rng.random() < 0.05 else rng.choice(ok))
    assert walks[-2][0].m.is_stopped() and walks[-1][0].m.is_error()


def test_a_fill_writes_every_word_of_its_row(backends, tokenizer):
    """GuidedStep's bitmask is not zeroed: fill_row must write each word of its row whatever it held. Rows
    prefilled with ones and with zeros get the same mask, along random walks (now and then a forbidden
    token) of every grammar, and in a regex's stopped and error states."""
    b = backends[0]
    rng = random.Random(4)
    walks = walks_and_ends(b, tokenizer, 12)
    for m, steps in walks:
        for _ in range(steps):
            ones = torch.full((3, b.words), -1, dtype=torch.int32)
            zeros = torch.zeros((3, b.words), dtype=torch.int32)
            b.fill_row(m, ones, 1)
            b.fill_row(m, zeros, 1)
            assert torch.equal(ones[1], zeros[1])
            assert (ones[0] == -1).all() and (ones[2] == -1).all()  # its neighbours untouched
            ok = unpack_bitmask(zeros[1:2], b.vocab_size)[0].nonzero().flatten().tolist()
            m.consume(rng.randrange(b.vocab_size) if rng.random() < 0.05 or not ok else rng.choice(ok))
    assert walks[-2][0].m.is_stopped() and walks[-1][0].m.is_error()


@pytest.mark.parametrize("rows", [None, [1, 2, 3], [3, 1], [0, 2], []])
def test_eos_if_empty_sets_eos_in_the_empty_rows_it_is_given(backends, rows):
    """Rows 1 and 3 are empty, 0 and 2 not: only the empty rows among `rows` (all when None; a run of
    consecutive rows is read as a view, other lists as a copy) get the EOS bits, nothing else changes."""
    b = backends[0]
    mask = torch.zeros((5, b.words), dtype=torch.int32)
    mask[0, 3] = mask[2, b.words - 1] = 1 << 4
    mask[4, 0] = -1
    before = mask.clone()
    b.eos_if_empty(mask, rows)
    eos = torch.zeros(b.words, dtype=torch.int32)
    for t in b.eos_ids:
        eos[t // 32] |= torch.tensor(1 << (t % 32)).to(torch.int32)
    for r in range(5):
        empty = r in (1, 3) and (rows is None or r in rows)
        assert torch.equal(mask[r], eos if empty else before[r]), r


def test_filled_ahead_bit_test_is_the_mask_bit_for_every_token(backends, tokenizer):
    """A row filled ahead (busy) is checked by a bit test of its mask: right for every token id, bit 31
    of a word (the sign) included, and for ids past the vocabulary."""
    from orcd.structured.guide import GuidedStep

    b = backends[0]
    m = b.matcher(regex_grammar("[a-z ]+", "r"))
    allowed = allowed_of(b, m).tolist()
    m.fill_s = 0.0  # a cheap row, filled ahead (a loaded CI box can take over SLOW_FILL_S for one mask)
    step = GuidedStep([m], [False], busy=lambda: True, pin=False)
    ids = list(range(b.vocab_size)) + [b.vocab_size + 40]
    assert step._bits(ids, [0] * len(ids)) == allowed + [False]
    assert any(allowed[t] for t in range(31, b.vocab_size, 32))


def rows_for(i: int, m, step: int) -> SampleRow:
    """Row i's sampling: greedy, seeded T=0.8, seeded with penalties, seeded top-k 20 (masked first)."""
    kind = i % 4
    params = [SP(temperature=0.0), SP(temperature=0.8, seed=i), SP(temperature=1.0, seed=i,
              repetition_penalty=1.3, frequency_penalty=0.5), SP(temperature=1.0, seed=i, top_k=20)][kind]
    return SampleRow(params, [7, 9, 7] if kind == 2 else [], step, m)


@pytest.mark.parametrize("free", [2, 0])
@pytest.mark.parametrize("mask_ahead", [True, False])
@pytest.mark.parametrize("ahead", ["never", "always", "some"])
def test_check_first_gives_the_full_mask_tokens(tokenizer, backends, ahead, mask_ahead, free, monkeypatch):
    """12 rows (3 grammars x 4 samplings) + `free` free rows walk 8 steps on random logits biased now and
    then toward an allowed token; both paths draw the same token every step, every token allowed -- with
    the rows filled ahead masked first (mask_ahead) or checked. No free rows: the masked-first rows are
    the whole batch, in fill order (top-k rows first), not batch order."""
    # every mask counts as cheap (a loaded CI box can take over SLOW_FILL_S for one)
    monkeypatch.setattr("orcd.structured.guide.SLOW_FILL_S", float("inf"))
    fast, full = CountingBackend(tokenizer, mask_ahead=mask_ahead), backends[1]
    rng, gen = random.Random(2), torch.Generator().manual_seed(3)
    gs = grammars()
    ms = [[b.matcher(gs[i % 3]) for i in range(12)] + [None] * free for b in (fast, full)]
    busy = {"never": lambda: False, "always": lambda: True, "some": lambda: rng.random() < 0.5}[ahead]
    fills = fast.rows_filled
    for step in range(8):
        logits = torch.randn(12 + free, fast.vocab_size, generator=gen) * 3
        for i in range(12):
            if rng.random() < 0.5:
                ok = allowed_of(full, ms[1][i]).nonzero().flatten().tolist()
                logits[i, rng.choice(ok)] += 12
        toks = [sample(logits, [rows_for(i, m, step) if m else SampleRow(SP(temperature=0.0))
                                for i, m in enumerate(path)], busy=busy) for path in ms]
        assert torch.equal(toks[0], toks[1]), step
        assert toks[0][12:].tolist() == logits[12:].argmax(-1).tolist()  # free rows: untouched
        for i, t in enumerate(toks[0][:12].tolist()):
            assert ms[1][i].allows(t)
            ms[0][i].consume(t)
            ms[1][i].consume(t)
    if ahead == "never":  # masks only for rejected rows, forced states, top-k rows
        assert fast.rows_filled - fills < 12 * 8
    if mask_ahead and ahead == "always":  # the demo vocabulary's masks are cheap: every row filled once
        assert fast.rows_filled - fills == 12 * 8  # a step, masked first


def test_rejected_row_gets_a_valid_token_and_only_it_is_masked(tokenizer):
    """Row 0's argmax is forbidden, row 1's allowed: one mask computed (row 0's), row 0 gets the
    masked argmax, row 1 keeps its token (check first without the per-row policy: with it, these cheap
    rows would be masked first)."""
    b = CountingBackend(tokenizer, mask_ahead=False)
    ms = [b.matcher(regex_grammar("(ab|c)+d", "r")) for _ in range(2)]
    allowed = allowed_of(b, ms[0])
    b.rows_filled = 0
    logits = torch.zeros(2, b.vocab_size)
    bad, good = (~allowed).nonzero()[0, 0], allowed.nonzero()[-1, 0]
    logits[0, bad], logits[0, good], logits[1, good] = 9.0, 5.0, 9.0
    rows = [SampleRow(SP(temperature=0.0), [], 0, m) for m in ms]
    assert sample(logits, rows, busy=lambda: False).tolist() == [good, good]
    assert b.rows_filled == 1 and ms[0].rejected and not ms[1].rejected


def test_a_rejected_row_in_a_forced_state_gets_the_forced_token(tokenizer):
    """A regex that forces "abc": the mask allows one token; a greedy and a sampled row whose unmasked
    token is another get it (checked first: mask_ahead off, or these cheap rows would be masked first)."""
    b = GrammarBackend(tokenizer, mask_ahead=False)
    ms = [b.matcher(regex_grammar("abc", "r")) for _ in range(2)]
    only = allowed_of(b, ms[0]).nonzero().flatten().tolist()
    assert len(only) == 1
    logits = torch.randn(2, b.vocab_size)
    logits[:, (only[0] + 1) % b.vocab_size] = 50.0
    rows = [SampleRow(SP(temperature=0.0), [], 0, ms[0]),
            SampleRow(SP(temperature=1.0, seed=3), [], 0, ms[1])]
    assert sample(logits, rows, busy=lambda: False).tolist() == only * 2


def test_a_row_in_its_error_state_ends_with_eos(tokenizer):
    b = GrammarBackend(tokenizer)
    m = b.matcher(regex_grammar("ab", "r"))
    m.consume(tokenizer.encode("z")[0])
    logits = torch.randn(1, b.vocab_size)
    assert sample(logits, [SampleRow(SP(temperature=0.0), [], 0, m)]).item() in b.eos_ids


@pytest.mark.parametrize("mask_ahead", [False, True])
@pytest.mark.parametrize("seeded", [True, False])
def test_sampled_distribution_is_the_masked_distribution(tokenizer, backends, seeded, mask_ahead):
    """1,000 draws at a regex's start from p over 4 tokens, 2 allowed (mass 0.5): the draws follow p / Z
    (chi-square, 1 degree of freedom, below 10.83: p = 0.001), seeded draws equal the full-mask path's;
    mask_ahead: every row (cheap) masked first, else checked and redrawn.
    The logits cover the vocabulary up to the largest of the 4 (the mask is cut to the logits' width)."""
    fast, full = CountingBackend(tokenizer, mask_ahead=mask_ahead), backends[1]
    g = regex_grammar("(ab|c)+d", "r")
    allowed = allowed_of(fast, fast.matcher(g))
    ok, no = allowed.nonzero().flatten().tolist()[:2], (~allowed).nonzero().flatten().tolist()[:2]
    logits = torch.full((max(ok + no) + 1,), -60.0)
    logits[[ok[0], no[0], ok[1], no[1]]] = torch.tensor([0.35, 0.3, 0.15, 0.2]).log()
    n = 1000
    random.seed(5)  # unseeded rows draw their seeds from `random`
    draws = []
    for b in (fast, full) if seeded else (fast,):
        rows = [SampleRow(SP(temperature=1.0, seed=s if seeded else None), [], 0, b.matcher(g))
                for s in range(n)]
        draws.append(sample(logits.expand(n, -1).clone(), rows, busy=lambda: False))
    counts = torch.bincount(draws[0], minlength=logits.shape[0])
    assert counts[ok].sum() == n
    expected = torch.tensor([0.7, 0.3]) * n
    chi2 = ((counts[ok].float() - expected) ** 2 / expected).sum().item()
    assert chi2 < 10.83, (counts[ok], expected)
    if seeded:
        assert torch.equal(draws[0], draws[1])


@pytest.mark.parametrize("mask_ahead", [True, False])
def test_a_row_filled_ahead_is_masked_first_and_never_redrawn(tokenizer, mask_ahead, monkeypatch):
    """Rows 0 and 2's argmax is forbidden, row 1's allowed. Rows 0 and 1 are filled ahead (busy):
    mask_ahead masks them before the draw, never checked or redrawn; without it they are checked by
    their masks' bits and row 0 is redrawn. Nothing is filled ahead once the device is idle; a slow
    row (fill_s over SLOW_FILL_S) is never filled ahead, rejected last step or not: row 2 is checked
    and redrawn either way."""
    # "slow" is 1 s here: a loaded CI box can take over the real 1 ms for one of rows 0 and 1's masks
    monkeypatch.setattr("orcd.structured.guide.SLOW_FILL_S", 1.0)
    from orcd.structured.guide import SLOW_FILL_S, GuidedStep

    b = CountingBackend(tokenizer, mask_ahead=mask_ahead)
    ms = [b.matcher(regex_grammar("(ab|c)+d", "r")) for _ in range(3)]
    allowed = allowed_of(b, ms[0])
    ms[2].fill_s = 2 * SLOW_FILL_S
    b.rows_filled = 0
    step = GuidedStep(ms, [False] * 3, busy=lambda: True, pin=False, mask_ahead=mask_ahead)
    assert (step.first, step.check) == (([0, 1], [2]) if mask_ahead else ([], [0, 1, 2]))
    assert b.rows_filled == 2
    idle = GuidedStep(ms, [False] * 3, busy=lambda: False, pin=False, mask_ahead=mask_ahead)
    assert idle.first == [] and idle.check == [0, 1, 2]  # the logits are ready: check every row
    ms[2].rejected = True  # a slow row rejected last step: still checked, not filled ahead
    slow = GuidedStep(ms, [False] * 3, busy=lambda: True, pin=False, mask_ahead=mask_ahead)
    assert slow.first == ([0, 1] if mask_ahead else [])
    ms[2].rejected, ms[2].fill_s = False, 2 * SLOW_FILL_S
    logits = torch.zeros(3, b.vocab_size)
    bad, good = (~allowed).nonzero()[0, 0], allowed.nonzero()[-1, 0]
    logits[:, bad], logits[:, good], logits[1, good] = 9.0, 5.0, 10.0  # row 1's argmax is allowed
    rows = [SampleRow(SP(temperature=0.0), [], 0, m) for m in ms]
    b.rows_filled = 0
    assert sample(logits, rows, busy=lambda: True).tolist() == [good] * 3
    assert not ms[1].rejected and ms[2].rejected
    assert ms[0].rejected is not mask_ahead  # masked first: never checked
    assert b.rows_filled == 3  # rows 0 and 1 ahead, row 2 (slow) after its rejection
    assert ms[2].fill_s <= SLOW_FILL_S  # measured again (the demo vocabulary's masks are cheap)
