"""Log-probabilities of sampled tokens (SamplingParams.logprobs = k): log-softmax of the logits sample()
used (penalties applied, before temperature and filters, as OpenAI's logprobs do not depend on
temperature), computed on the logits' device and read in one host copy. A step launched without
waiting (the engine's overlap) computes them at launch and reads them with its tokens (InFlight)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from orcd.engine.io import TokenLogprobs
from orcd.runner.sampler import SampleRow, apply_penalties, has_penalty


@dataclass
class PendingLogprobs:
    """token_logprobs before its host copy: the rows that asked (`want`, indices into the step's rows)
    and their k; chosen [w] float32, top_lp [w, kmax] float32, top_id [w, kmax] int64."""

    want: list[int]
    ks: list[int]
    chosen: torch.Tensor
    top_lp: torch.Tensor
    top_id: torch.Tensor

    def moved(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> PendingLogprobs:
        """The same, each tensor through copy (e.g. to pinned host memory, non-blocking)."""
        return PendingLogprobs(self.want, self.ks, copy(self.chosen), copy(self.top_lp), copy(self.top_id))

    def read(self, n_rows: int) -> list[TokenLogprobs | None]:
        """Per row of the step, its TokenLogprobs or None (one host copy of each tensor)."""
        out: list[TokenLogprobs | None] = [None] * n_rows
        chosen, top_lp, top_id = self.chosen.tolist(), self.top_lp.tolist(), self.top_id.tolist()
        for j, (i, k) in enumerate(zip(self.want, self.ks, strict=True)):
            out[i] = TokenLogprobs(chosen[j], list(zip(top_id[j][:k], top_lp[j][:k], strict=True)))
        return out


def logprobs_on_device(logits: torch.Tensor, rows: list[SampleRow], tokens: torch.Tensor,
                       last_ids: torch.Tensor | None = None) -> PendingLogprobs | None:
    """The logprobs of the rows that ask for them, on the device (None when no row does). last_ids: as
    sample()'s (the rows' input tokens, for penalties that count a token still in flight)."""
    want = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    if not want:
        return None
    sub_rows = [rows[i] for i in want]
    idx = torch.tensor(want, device=logits.device)
    sub = logits.index_select(0, idx).float()
    if any(r.penalty_token_ids and has_penalty(r.params) for r in sub_rows):
        sub_last = last_ids.index_select(0, idx) if last_ids is not None else None
        sub = apply_penalties(sub, sub_rows, sub_last)  # row-wise: the values sample() computed for them
    lp = torch.log_softmax(sub, dim=-1)
    chosen = lp.gather(1, tokens.index_select(0, idx).to(torch.int64)[:, None])[:, 0]
    ks = [r.params.logprobs for r in sub_rows]
    kmax = max(ks)
    top_lp, top_id = lp.topk(kmax, dim=-1) if kmax else (lp[:, :0], lp[:, :0].long())
    return PendingLogprobs(want, ks, chosen, top_lp, top_id)


def token_logprobs(logits: torch.Tensor, rows: list[SampleRow], tokens: torch.Tensor
                   ) -> list[TokenLogprobs | None]:
    """Per row, None, or (when its params ask for logprobs = k) the log-probability of its sampled token
    and its k most likely tokens. One host copy."""
    pending = logprobs_on_device(logits, rows, tokens)
    return pending.read(len(rows)) if pending is not None else [None] * len(rows)
