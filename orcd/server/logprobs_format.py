"""TokenLogprobs (engine) -> OpenAI's two logprobs shapes.

Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
"refusal": null}`. Completions (legacy): `{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
"text_offset"}`, where each top_logprobs dict also holds the sampled token (OpenAI: "up to logprobs+1").

A token's `bytes` are its exact bytes; its `token` string is their UTF-8 text, or, for a piece of a
multi-byte character, `bytes:\\xe2\\x80` (OpenAI's legacy spelling) so that no text is invented.
"""

from __future__ import annotations

import math

from orcd.engine.io import TokenEvent, TokenLogprobs

FLOOR = -9999.0  # what OpenAI reports for a token with no probability at all (JSON has no -Infinity)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else FLOOR


class TokenNames:
    """Token id -> (token string, bytes), cached per server (the vocabulary does not change)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is None:
            raw = bytes(self.tokenizer.piece_bytes(token_id))
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
            hit = self._cache[token_id] = (text, list(raw))
        return hit


def scored(events: list[TokenEvent]) -> list[tuple[int, TokenLogprobs]]:
    """(token id, logprobs) of the events that carry both. The end-of-generation token that ended a
    request is not part of its text, so it is left out, as OpenAI leaves it out."""
    return [(ev.token_id, ev.logprobs) for ev in events if ev.token_id is not None and ev.logprobs is not None
            and not (ev.finished and ev.finish_reason == "eos")]


def chat_content(names: TokenNames, items: list[tuple[int, TokenLogprobs]]) -> list[dict]:
    def entry(token_id: int, logprob: float) -> dict:
        text, raw = names(token_id)
        return {"token": text, "logprob": _finite(logprob), "bytes": raw}

    return [{**entry(tid, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]} for tid, lp in items]


class CompletionLogprobs:
    """Builds the legacy shape; text_offset (where each token's text starts in the returned text)
    continues across the chunks of one stream."""

    def __init__(self, names: TokenNames, offset: int):
        self.names = names
        self.offset = offset  # characters before the next event's text (the echoed prompt at first)

    def block(self, events: list[TokenEvent]) -> dict:
        tokens, token_lps, tops, offsets = [], [], [], []
        for ev in events:
            for tid, lp in scored([ev]):
                text = self.names(tid)[0]
                top = {self.names(t)[0]: _finite(v) for t, v in lp.top}
                top.setdefault(text, _finite(lp.logprob))
                tokens.append(text)
                token_lps.append(_finite(lp.logprob))
                tops.append(top)
                offsets.append(self.offset)
            self.offset += len(ev.text)
        return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
