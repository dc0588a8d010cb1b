"""Per-request output: token ids -> text increments, stop tokens, stop strings, max_tokens.

Text that could be the start of a stop string is held back until it cannot be; the stop string
itself is never emitted. Each generated token yields one TokenEvent; the last one is final.
"""

from __future__ import annotations

from orcd.engine.io import FinishReason, TokenEvent
from orcd.engine.sequence import Sequence


def find_stop(text: str, stops: tuple[str, ...]) -> int:
    """Index of the earliest stop string in text, or -1."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else -1


def held_suffix(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of text that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class RequestOutput:
    """Streaming state of one request: its sequence, detokenizer and held-back text."""

    def __init__(self, seq: Sequence, detokenizer, eog_ids: frozenset[int]):
        self.seq = seq
        self.detok = detokenizer
        p = seq.sampling
        self.eog_ids = frozenset() if p.ignore_eos else frozenset(eog_ids)
        self.stop_ids = frozenset(p.stop_token_ids)
        self.stops = tuple(p.stop)
        self.pending = ""  # decoded text not yet emitted
        # Prompt tokens the prefix cache served at the admission that sampled the first token (a later
        # re-admission after preemption finds the request's own blocks: not counted)
        self.cached_tokens = 0

    @property
    def request_id(self) -> str:
        return self.seq.request_id

    def on_token(self, token_id: int) -> TokenEvent:
        """The event for a newly sampled token (seq already holds it); `.finished` if it ends the request."""
        seq = self.seq
        if seq.num_generated == 1:
            self.cached_tokens = min(seq.num_cached_tokens, seq.num_prompt_tokens)
        if token_id in self.eog_ids:
            return self.final(token_id, "eos")
        if token_id in self.stop_ids:
            return self.final(token_id, "stop")
        self.pending += self.detok.push(token_id)
        cut = find_stop(self.pending, self.stops) if self.stops else -1
        if cut >= 0:
            self.pending = self.pending[:cut]
            return self.final(token_id, "stop", flush=False)
        if seq.num_generated >= seq.sampling.max_tokens:
            return self.final(token_id, "length")
        keep = held_suffix(self.pending, self.stops) if self.stops else 0
        text = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(text) :]
        return self._event(token_id, text, seq.num_generated - 1)

    def final(
        self, token_id: int | None, reason: FinishReason, error: str | None = None, flush: bool = True
    ) -> TokenEvent:
        """The final event: whatever text is held (unless a stop string ended it) plus the reason."""
        text = self.pending
        if flush:
            text += self.detok.flush()
            if self.stops and (cut := find_stop(text, self.stops)) >= 0:
                text, reason = text[:cut], "stop"
        self.pending = ""
        index = self.seq.num_generated - 1 if token_id is not None else self.seq.num_generated
        event = self._event(token_id, text, index)
        event.finished, event.finish_reason, event.error = True, reason, error
        return event

    def _event(self, token_id: int | None, text: str, index: int) -> TokenEvent:
        seq = self.seq
        first = token_id is not None and index == 0 and seq.first_scheduled_time is not None
        return TokenEvent(
            request_id=seq.request_id,
            token_id=token_id,
            text=text,
            index=index,
            prompt_tokens=seq.num_prompt_tokens,
            generated_tokens=seq.num_generated,
            queue_s=seq.first_scheduled_time - seq.arrival_time if first else None,
            cached_tokens=self.cached_tokens,
        )
