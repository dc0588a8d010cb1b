"""One sampling step's grammar work: which constrained rows are masked before sampling, which are only
checked after, and the masks of the rows whose unmasked token the grammar rejects.

Check first (GrammarBackend.check_first): a constrained row is drawn from its unmasked logits; if the
grammar allows the token it stands, else the row is drawn again from its masked logits. This is the
token the full mask gives, not only its distribution:
- greedy: the unmasked argmax, when allowed, is also the masked argmax (first index among equal maxima
  in both);
- plain sampling (temperature, penalties, seed): the sampler is the Gumbel-max race argmax(l / T + g)
  with noise g fixed by (seed, step, token) (orcd.runner.sampler), so the unmasked winner, when allowed,
  wins the masked race too, and a redraw uses the same noise. In distribution: P(t) = p(t) +
  (1 - Z) p(t) / Z = p(t) / Z, Z = the allowed mass.
With top-k, top-p or min-p the truncation set depends on the mask (the k best allowed tokens are not the
k best tokens), so such rows are masked before sampling, as every row is when check_first is off.
Logprobs are the model's, before the mask (SamplingParams.logprobs), from the same logits either way.

Overlap: on CUDA this runs while the device still computes the logits. Every row's pending tokens are
applied then, and rows' masks are filled ahead while the device is busy (rows rejected last step first,
rows whose last mask took over SLOW_FILL_S never: inside a maxLength string llguidance walks the whole
vocabulary); a filled row is checked by one bit test, the others by llguidance (Matcher.quick_check).
Which rows were filled ahead changes the time, never the tokens. A rejected row whose mask allows one
token (forced bytes: JSON keys and punctuation) gets it on the CPU; the others are drawn again on the
device from their masked logits, one batch.

Per-row policy (GrammarBackend.mask_ahead, the default): a row whose last mask was cheap (SLOW_FILL_S
or less) is filled while the device is busy, and masked before the draw like a masks_first row, not
checked after it, so it never pays the second pass (the step's sync, its mask upload, a second draw)
when its unmasked token is rejected. Slow rows (inside maxLength strings) are always checked, never
filled ahead: on the H100 filling a slow row rejected last step ahead (4.5-8.7 ms a fill) outlasted the
~3 ms step it was meant to hide behind (bounded schema, 64 rows: 75.9 % of the step against 66.8 % for
check-first; bench/results/mask_cost_4607b47.json), and cheap rows filled whether or not the device was
still busy let rows entering a string pay a slow fill on the step's path (13.3 against 8.4 ms a step;
mask_cost_ae555e3.json); a cheap row not filled by the time the logits are ready is checked. Both
draws give the same token, so the policy changes the time only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from orcd.structured.backend import GrammarBackend, Matcher

SLOW_FILL_S = 1e-3  # a row whose last mask took longer is checked, never filled ahead


def masks_first(params, vocab: int, check_first: bool) -> bool:
    """Whether a constrained row with these SamplingParams needs its mask before sampling: a sampled
    row with truncation (top-k below the vocabulary, top-p, min-p), or every row when not check_first."""
    if not check_first:
        return True
    if params.greedy:
        return False
    return 0 < params.top_k < vocab or params.top_p < 1.0 or params.min_p > 0.0


class GuidedStep:
    """The constrained rows of one batch: row i of the batch -> matchers[i] (None: a free row)."""

    def __init__(self, matchers: list[Matcher | None], first: list[bool], busy: Callable[[], bool],
                 pin: bool, mask_ahead: bool = False):
        """first[i]: row i is masked before sampling (masks_first). busy(): whether the device still
        computes the logits (fill masks ahead while it does). pin: pinned bitmask (CUDA uploads).
        mask_ahead: the per-row policy (_ahead); rows filled join self.first (masked before the draw)
        instead of being checked."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        self.first = [i for i in rows if first[i]]
        self.check = [i for i in rows if not first[i]]
        self.matchers = matchers
        self.backend: GrammarBackend = matchers[rows[0]].backend
        # row -> slot of the bitmask, given in fill order: self.first's rows hold slots 0..len(first)-1
        # (that block uploads as is), then the rows filled later
        self.slot: dict[int, int] = {}
        # not zeroed: a slot is read only once filled, and a fill writes every word of its row (zeroing the
        # 64 rows of Gemma's 262k vocabulary, 2 MiB pinned, took ~0.35 ms a step on the H200's host)
        self.bitmask = torch.empty((len(rows), self.backend.words), dtype=torch.int32, pin_memory=pin)
        self.filled: list[int] = []  # rows whose mask is in the bitmask, in slot order
        self._fill(self.first)
        for i in self.check:
            matchers[i].flush()
        self._ahead(busy, mask_ahead)
        self.backend.eos_if_empty(self.bitmask, [self.slot[i] for i in self.filled])
        if mask_ahead:  # filled -> masked first: slots stay in self.first's order
            self.first = list(self.filled)
            self.check = [i for i in self.check if i not in self.slot]

    def _ahead(self, busy: Callable[[], bool], mask_ahead: bool) -> None:
        """Fill cheap rows' masks (the last took SLOW_FILL_S or less) before the draw while busy();
        slow rows are left to the check. mask_ahead: in row order (they join self.first); else those
        rejected last step first (they stay checked, by their masks' bits)."""
        ms = self.matchers
        cheap = [i for i in self.check if ms[i].fill_s <= SLOW_FILL_S]
        for i in cheap if mask_ahead else sorted(cheap, key=lambda i: not ms[i].rejected):
            if not busy():
                break
            self._fill([i])

    def _fill(self, rows: list[int]) -> None:
        """Fill these rows' masks (without the EOS rule: eos_if_empty after); each takes the next slot."""
        for i in rows:
            self.slot[i] = len(self.slot)
        self.backend.fill_rows([self.matchers[i] for i in rows], self.bitmask, [self.slot[i] for i in rows])
        self.filled += rows

    def first_masks(self) -> torch.Tensor:
        """Bitmask [len(self.first), W] int32 of the rows masked before sampling, in self.first's order
        (a view of the pinned buffer)."""
        return self.bitmask[: len(self.first)]

    def rejected(self, tokens: torch.Tensor) -> list[int]:
        """The checked rows whose token in `tokens` [N] (drawn unmasked) the grammar forbids; one host
        copy of `tokens` (the step's sync). Sets each checked matcher's `rejected`."""
        if not self.check:
            return []
        every = tokens.tolist()
        toks = [every[i] for i in self.check]
        ok = dict(zip(self.check, self._bits(toks), strict=True))
        ask = []  # rows only the mask can judge (Matcher.quick_check)
        for i, t in zip(self.check, toks, strict=True):
            if ok[i] is None:
                ok[i] = self.matchers[i].quick_check(t)
                if ok[i] is None:
                    ask.append(i)
        if ask:
            self.ensure(ask)
            for i, b in zip(ask, self._bits([every[i] for i in ask], ask), strict=True):
                ok[i] = b
        for i in self.check:
            self.matchers[i].rejected = not ok[i]
        return [i for i in self.check if not ok[i]]

    def _bits(self, toks: list[int], rows: list[int] | None = None) -> list[bool | None]:
        """Per row of `rows` (default the checked rows) its token toks[j]'s bit in its mask; None where
        its mask was not filled."""
        rows = self.check if rows is None else rows
        have = set(self.filled)
        js = [j for j, i in enumerate(rows) if i in have]
        out: list[bool | None] = [None] * len(rows)
        if not js:
            return out
        t = np.array([toks[j] for j in js], dtype=np.int64)
        w = self.bitmask.shape[1]
        slots = np.array([self.slot[rows[j]] for j in js])
        words = self.bitmask.numpy()[slots, np.minimum(t >> 5, w - 1)].astype(np.int64)  # bit 31: sign
        bits = ((((words >> (t & 31)) & 1) == 1) & (t >= 0) & (t < 32 * w)).tolist()
        for j, b in zip(js, bits, strict=True):
            out[j] = b
        return out

    def ensure(self, rows: list[int]) -> None:
        """Fill the masks of these rows that were not filled yet."""
        have = set(self.filled)
        new = [i for i in rows if i not in have]
        self._fill(new)
        self.backend.eos_if_empty(self.bitmask, [self.slot[i] for i in new])

    def masks(self, rows: list[int]) -> torch.Tensor:
        """Bitmask [len(rows), W] int32 of these rows (filled now where not filled ahead), in order
        (pinned like the step's buffer)."""
        self.ensure(rows)
        out = torch.empty((len(rows), self.bitmask.shape[1]), dtype=torch.int32,
                          pin_memory=self.bitmask.is_pinned())
        return torch.index_select(self.bitmask, 0, torch.tensor([self.slot[i] for i in rows]), out=out)

    def single(self, rows: list[int]) -> dict[int, int]:
        """row -> token for the rows whose mask (filled now where not filled yet) allows one token (forced
        bytes: a key, punctuation): the masked draw is that token whatever the logits, unless its logit
        is -inf or NaN, where the full mask's draw is no allowed token either."""
        self.ensure(rows)
        bits = self.bitmask.numpy()[[self.slot[i] for i in rows]]
        nz = np.count_nonzero(bits, axis=1)
        out = {}
        for j in np.flatnonzero(nz == 1).tolist():
            w = int(np.flatnonzero(bits[j])[0])
            word = int(bits[j, w]) & 0xFFFFFFFF
            if word & (word - 1) == 0:  # one bit
                out[rows[j]] = 32 * w + word.bit_length() - 1
        return out
