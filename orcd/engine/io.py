"""The two handoff objects between the scheduler and the model runner, plus engine I/O types.

The scheduler decides *what to run* (SchedulerOutput); the runner answers *what came back*
(ModelRunnerOutput). Both carry only ids and ints, so the scheduler is testable on the CPU
with hand-made runner output and no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from orcd.engine.sampling_params import SamplingParams

FinishReason = Literal["eos", "stop", "length", "cancelled", "error"]


@dataclass
class ScheduledSeq:
    """One sequence's share of a step.

    Positions computed this step are [num_computed, num_computed + len(token_ids)).
    block_table covers every position up to num_computed + len(token_ids) (block_size each).
    """

    seq_id: int
    token_ids: list[int]  # tokens whose K/V are computed now (a prefill chunk, or 1 decode token)
    num_computed: int  # tokens of this sequence already in the KV cache before this step
    block_table: list[int]  # physical KV block ids, in position order
    sample: bool  # True when this chunk ends the known tokens: sample one new token
    sampling: SamplingParams
    # Tokens that count for repetition/presence/frequency penalties (prompt + generated so far).
    penalty_token_ids: list[int] = field(default_factory=list)
    num_generated: int = 0  # tokens generated so far; with the seed it fixes this step's noise
    # orcd.structured.backend.Matcher when the request has a grammar: the sampler masks this row's logits
    # with it (read-only for the runner; the engine advances it). In-process only: never sent to TP followers.
    matcher: Any = None


@dataclass
class SchedulerOutput:
    seqs: list[ScheduledSeq]
    num_tokens: int  # sum of len(token_ids): never above the step's token budget

    @property
    def empty(self) -> bool:
        return not self.seqs


@dataclass
class TokenLogprobs:
    """Log-probabilities at one sampled position (SamplingParams.logprobs = k)."""

    logprob: float  # of the sampled token
    top: list[tuple[int, float]]  # the k most likely (token id, logprob), best first


@dataclass
class ModelRunnerOutput:
    sampled: dict[int, int]  # seq_id -> sampled token id (only for ScheduledSeq.sample == True)
    failed: dict[int, str] = field(default_factory=dict)  # seq_id -> error message (step failed)
    logprobs: dict[int, TokenLogprobs] = field(default_factory=dict)  # seq_id -> (rows that asked only)


@dataclass
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams


@dataclass
class TokenEvent:
    """What the engine streams back for one request: one event per generated token, then a final one."""

    request_id: str
    token_id: int | None  # None on a final event that carries no new token
    text: str  # UTF-8-complete text increment ("" while a character or a possible stop string is held)
    index: int  # 0-based index of the generated token
    finished: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    prompt_tokens: int = 0
    generated_tokens: int = 0
    logprobs: TokenLogprobs | None = None  # of token_id, when the request asked (SamplingParams.logprobs)
    queue_s: float | None = None  # first token's event only: s from arrival to the first scheduled step
    cached_tokens: int = 0  # prompt tokens whose K/V the prefix cache served (whole blocks); 0 before a token
