"""One request's tokens and bookkeeping, as the scheduler and block manager see it."""

from __future__ import annotations

import itertools
import time
from enum import Enum

from orcd.engine.io import FinishReason
from orcd.engine.sampling_params import SamplingParams

_seq_ids = itertools.count()
# An output token the step in flight is still computing (the engine's overlap): never sent to a tokenizer
# or a block hash; the sampler's penalties read it as the row's input token, which the device has
# (orcd.runner.sampler.sample's last_ids). Sequence.resolve replaces it with the sampled token.
PLACEHOLDER = -1


class SequenceStatus(Enum):
    WAITING = "waiting"  # queued, or preempted (no KV blocks held)
    RUNNING = "running"  # holds KV blocks; computed tokens catch up with known tokens
    FINISHED = "finished"


class Sequence:
    """Prompt + generated tokens; `num_computed` of them have K/V in the blocks of `block_table`.

    Invariant: len(block_table) * block_size >= num_computed. Blocks [0, len(block_hashes)) are full,
    computed and registered in the prefix cache (block_hashes[i] chains every token before it).
    """

    def __init__(self, request_id: str, prompt_token_ids: list[int], sampling: SamplingParams):
        self.seq_id = next(_seq_ids)
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.sampling = sampling
        # penalty_token_ids are sent to the runner only when a penalty is on
        self.uses_penalties = (sampling.repetition_penalty != 1.0 or sampling.presence_penalty != 0.0
                               or sampling.frequency_penalty != 0.0)
        self.status = SequenceStatus.WAITING
        self.num_computed = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at the last admission
        # Prefix-cache namespace: the first block's hash chains from it (the engine gives sequences it
        # computes with batch-invariant kernels their own, so they never reuse K/V computed otherwise)
        self.cache_salt: int | None = None
        self.num_preemptions = 0
        self.finish_reason: FinishReason | None = None
        self.arrival_time = time.monotonic()
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        # orcd.structured.backend.Matcher of a request with a grammar; append_token advances it
        self.matcher = None

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_generated(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens [start, end) of prompt + output without building the whole list when possible."""
        n_prompt = len(self.prompt_token_ids)
        if end <= n_prompt:
            return self.prompt_token_ids[start:end]
        if start >= n_prompt:
            return self.output_token_ids[start - n_prompt : end - n_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - n_prompt]

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        if self.matcher is not None:
            self.matcher.consume(token_id)
        if self.first_token_time is None:
            self.first_token_time = time.monotonic()

    def append_placeholder(self) -> None:
        """The token a step in flight samples, before it is known (Scheduler.advance)."""
        self.output_token_ids.append(PLACEHOLDER)

    def resolve(self, token_id: int) -> None:
        """The placeholder at the end becomes the sampled token."""
        assert self.output_token_ids[-1] == PLACEHOLDER, "no placeholder to resolve"
        self.output_token_ids[-1] = token_id
        if self.matcher is not None:
            self.matcher.consume(token_id)
        if self.first_token_time is None:
            self.first_token_time = time.monotonic()

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.seq_id}, req={self.request_id!r}, {self.status.value}, "
            f"computed={self.num_computed}/{self.num_tokens}, blocks={self.block_table})"
        )
