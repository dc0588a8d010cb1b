"""Token sampling on the logits of a batch: penalties, temperature, top-k, top-p, min-p, seeded noise.

Seeded sampling is batch-invariant: a row's noise for vocabulary index i is a counter-based hash of
(seed, num_generated, i), so the sampled token never depends on which other rows share the batch.
Sampling is the Gumbel-max race: argmax(logits / T + Gumbel(u)), u = hash -> (0, 1).

Rows with a grammar (SampleRow.matcher) go through orcd.structured.guide: their matchers take the
previous step's tokens on the CPU before anything here waits for the device (on CUDA that overlaps the
forward pass still running); rows are drawn from their unmasked logits and only those whose token the
grammar rejects are drawn again from masked logits (-inf at forbidden tokens, from an allowed-token
bitmask uploaded once), which gives the token the full mask gives. Rows with top-k / top-p / min-p, and
rows whose mask was filled while the device ran (GrammarBackend.mask_ahead), are masked before the draw.
This runs on the logits the decode CUDA graph returns, outside the graph; rows without a grammar are not
touched.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from orcd.engine.sampling_params import SamplingParams
from orcd.structured.guide import GuidedStep, masks_first
from orcd.structured.mask import apply_mask, to_device

M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B1


@dataclass
class SampleRow:
    params: SamplingParams
    penalty_token_ids: list[int] = field(default_factory=list)
    num_generated: int = 0
    matcher: Any = None  # orcd.structured.backend.Matcher: its grammar masks this row's logits


def _fmix32_int(x: int) -> int:
    """murmur3's 32-bit finalizer on a Python int (exact)."""
    x &= M32
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & M32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & M32
    return x ^ (x >> 16)


def row_key(seed: int, step: int) -> int:
    """32-bit stream key from a 63-bit seed and the number of tokens generated so far."""
    return _fmix32_int((seed & M32) ^ _fmix32_int((seed >> 32) ^ _fmix32_int(step * GOLDEN + 0x6A09E667)))


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for int64 x in [0, 2**32) without int64 overflow (16-bit split)."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & M32


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def uniform_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """keys [N] int64 (32-bit values) -> u [N, V] float64 in (0, 1); element (r, i) depends on keys[r], i."""
    idx = torch.arange(vocab, device=keys.device, dtype=torch.int64)
    h = _fmix32(_mul32(idx + 1, GOLDEN)[None, :] ^ keys[:, None])
    h = _fmix32(h ^ (keys[:, None] >> 7))
    return (h.double() + 0.5) * (1.0 / 2**32)


def apply_penalties(logits: torch.Tensor, rows: list[SampleRow], last_ids: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """Repetition (HF/llama.cpp: positive / r, negative * r), presence and frequency penalties. last_ids:
    as sample()'s."""
    n, v = logits.shape
    width = max(len(r.penalty_token_ids) for r in rows)
    ids = torch.full((n, width), v, dtype=torch.int64)  # pad -> dummy column v
    for i, r in enumerate(rows):
        ids[i, : len(r.penalty_token_ids)] = torch.tensor(r.penalty_token_ids, dtype=torch.int64)
    ids = to_device(ids, logits.device)
    if last_ids is not None:  # placeholders (negative) -> the row's input token
        ids = torch.where(ids < 0, last_ids[:, None], ids)
    counts = torch.zeros((n, v + 1), device=logits.device, dtype=torch.float32)
    counts.scatter_add_(1, ids, torch.ones((n, width), device=logits.device))
    counts = counts[:, :v]
    seen = counts > 0
    dev = logits.device
    rep = to_device([r.params.repetition_penalty for r in rows], dev)[:, None]
    pres = to_device([r.params.presence_penalty for r in rows], dev)[:, None]
    freq = to_device([r.params.frequency_penalty for r in rows], dev)[:, None]
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(seen, penalized, logits)
    return logits - freq * counts - pres * seen.float()


def _filter(scaled: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """Mask (-inf) tokens outside top-k, then top-p of what is left, then min-p. scaled: logits / T."""
    n, v = scaled.shape
    dev = scaled.device
    top_k = [r.params.top_k for r in rows]
    top_p = [r.params.top_p for r in rows]
    min_p = [r.params.min_p for r in rows]
    if any(0 < k < v for k in top_k) or any(p < 1.0 for p in top_p):
        sorted_l, order = scaled.sort(dim=-1, descending=True, stable=True)
        rank = torch.arange(v, device=dev)[None, :]
        k = to_device([kk if 0 < kk < v else v for kk in top_k], dev)[:, None]
        sorted_l = sorted_l.masked_fill(rank >= k, float("-inf"))
        probs = sorted_l.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass strictly ahead: keep the smallest set reaching p
        # top_p == 1 rows must not lose rounding-error tails: their result cannot depend on the batch
        p = to_device([pp if pp < 1.0 else float("inf") for pp in top_p], dev)[:, None]
        sorted_l = sorted_l.masked_fill((before >= p) & (rank > 0), float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_l)
    if any(m > 0 for m in min_p):
        probs = scaled.softmax(dim=-1)
        floor = to_device(min_p, dev)[:, None] * probs.max(dim=-1, keepdim=True).values
        scaled = scaled.masked_fill(probs < floor, float("-inf"))
    return scaled


def _seeds(rows: list[SampleRow]) -> list[int | None]:
    """Per row the seed of its noise: None for greedy rows, a fresh one for unseeded sampled rows (drawn
    once per step, so a grammar's redraw races the same noise)."""
    return [None if r.params.greedy else r.params.seed if r.params.seed is not None
            else random.getrandbits(63) for r in rows]


def _race(logits: torch.Tensor, rows: list[SampleRow], seeds: list[int | None],
          last_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Penalties, then argmax (greedy rows) or the seeded Gumbel-max race (the others) -> [N] int64."""
    if any(r.penalty_token_ids and has_penalty(r.params) for r in rows):
        logits = apply_penalties(logits.float(), rows, last_ids)
    out = logits.argmax(dim=-1)
    hot = [i for i, r in enumerate(rows) if not r.params.greedy]
    if not hot:
        return out
    sub_rows = [rows[i] for i in hot]
    hot_idx = to_device(hot, logits.device, torch.int64)
    temps = to_device([r.params.temperature for r in sub_rows], logits.device)[:, None]
    scaled = _filter(logits[hot_idx].float() / temps, sub_rows)
    keys = [row_key(seeds[i], r.num_generated) for i, r in zip(hot, sub_rows, strict=True)]
    keys = to_device(keys, logits.device, torch.int64)
    gumbel = -torch.log(-torch.log(uniform_noise(keys, logits.shape[1]))).float()
    out[hot_idx] = (scaled + gumbel).argmax(dim=-1)
    return out


def _device_busy(logits: torch.Tensor) -> Callable[[], bool]:
    """Whether the device is still computing `logits` (an event after the work queued so far); never on
    the CPU, where they are ready."""
    if not logits.is_cuda:
        return lambda: False
    ev = torch.cuda.Event()
    ev.record()
    return lambda: not ev.query()


def _guide(logits: torch.Tensor, rows: list[SampleRow], busy: Callable[[], bool] | None) -> GuidedStep:
    matchers = [r.matcher for r in rows]
    backend = next(m for m in matchers if m is not None).backend
    first = [m is not None and masks_first(r.params, logits.shape[1], backend.check_first)
             for r, m in zip(rows, matchers, strict=True)]
    return GuidedStep(matchers, first, busy or _device_busy(logits), pin=logits.is_cuda,
                      mask_ahead=backend.mask_ahead)


def sample(logits: torch.Tensor, rows: list[SampleRow], greedy: torch.Tensor | None = None,
           busy: Callable[[], bool] | None = None, last_ids: torch.Tensor | None = None) -> torch.Tensor:
    """logits [N, V] float32 -> token ids [N] int64 on logits' device. Rows with temperature 0 are greedy.

    Rows with a grammar (orcd.structured.guide): those that need it are masked before the draw; the
    others are drawn unmasked, checked against their grammar (the step's one host sync), and the rejected
    ones drawn again from their masked logits with the same noise, which gives the full mask's token.
    greedy: logits' argmax [N] (the decode graph's), used as the unmasked draw when every row is greedy
    without penalties. busy: whether the device still computes the logits (default: an event on CUDA);
    masks are filled ahead while it does. last_ids: int64 [N] on the device, each row's input token this
    step; it stands for the placeholder (orcd.engine.sequence.PLACEHOLDER) that ends a row's penalty
    tokens when the step was launched before that token reached the host (the engine's overlap)."""
    seeds = _seeds(rows)
    if all(r.matcher is None for r in rows):
        return _race(logits, rows, seeds, last_ids)
    guide = _guide(logits, rows, busy)
    if guide.first:
        tokens = _race(apply_mask(logits, guide.first, guide.first_masks()), rows, seeds, last_ids)
    else:
        tokens = greedy.clone() if greedy is not None else _race(logits, rows, seeds, last_ids)
    redo = guide.rejected(tokens)
    if not redo:
        return tokens
    one = guide.single(redo)  # rows whose grammar allows one token: that token, no device work
    if one:
        tokens[torch.tensor(list(one), device=logits.device)] = torch.tensor(list(one.values()),
                                                                            device=logits.device)
    redo = [i for i in redo if i not in one]
    if redo:
        idx = torch.tensor(redo, device=logits.device)
        masked = apply_mask(logits.index_select(0, idx), list(range(len(redo))), guide.masks(redo))
        ids = last_ids.index_select(0, idx) if last_ids is not None else None
        tokens[idx] = _race(masked, [rows[i] for i in redo], [seeds[i] for i in redo], ids)
    return tokens


def has_penalty(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0


def sample_rows(seqs) -> list[SampleRow]:
    """The sampling state of scheduled sequences (orcd.engine.io.ScheduledSeq), in order."""
    return [SampleRow(s.sampling, s.penalty_token_ids, s.num_generated, s.matcher) for s in seqs]


def pick_tokens(logits: torch.Tensor, greedy: torch.Tensor, rows: list[SampleRow],
                last_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Tokens of `rows` from logits [k, V] float32 and their argmax greedy [k]: `greedy` itself when
    every row is greedy without penalties or grammar (what sample() would return), else
    sample(logits, rows), which starts from `greedy` where every row is greedy without penalties."""
    plain = all(r.params.greedy and not (r.penalty_token_ids and has_penalty(r.params)) for r in rows)
    if plain and all(r.matcher is None for r in rows):
        return greedy
    return sample(logits, rows, greedy if plain else None, last_ids=last_ids)
