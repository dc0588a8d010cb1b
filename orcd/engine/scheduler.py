"""Continuous batching: each step picks work under a token budget, by tokens computed per sequence.

There are no prefill/decode modes. A sequence's `num_computed` catches up with its `num_tokens`: a
running sequence that is one token behind is a decode, one that is further behind is a prefill chunk.
Running sequences go first (oldest first), then waiting ones are admitted in arrival order. When KV
blocks run out, the newest running sequence is preempted: its blocks are freed and it is recomputed
later from its prompt + generated tokens (the prefix cache usually gives most of them back).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from orcd.engine.block_manager import BlockManager
from orcd.engine.io import FinishReason, ModelRunnerOutput, ScheduledSeq, SchedulerOutput
from orcd.engine.sequence import Sequence, SequenceStatus


@dataclass
class SeqUpdate:
    """What one step did to one scheduled sequence."""

    seq: Sequence
    new_token: int | None  # the token sampled this step, if any
    error: str | None = None


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last one is preempted first
        self.num_preemptions = 0

    # ---- queue ----
    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def live_seqs(self) -> list[Sequence]:
        return [*self.running, *self.waiting]

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Take seq out of the queues and free its blocks (idempotent)."""
        if seq.is_finished:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free_seq(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.finish_time = time.monotonic()

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free_seq(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    # ---- schedule ----
    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []  # (seq, tokens to compute now)
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            if n <= 0:
                i += 1
                continue
            while not self.bm.append_slots(seq, n):
                victim = self.running[-1]  # newest; never one already scheduled (those are before i)
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
                i += 1
        if not preempted:
            budget = self._admit(scheduled, budget)
        seqs = [self.scheduled(seq, n) for seq, n in scheduled]
        return SchedulerOutput(seqs=seqs, num_tokens=self.max_num_batched_tokens - budget)

    def _admit(self, scheduled: list[tuple[Sequence, int]], budget: int) -> int:
        """Move waiting sequences to running while budget, seat count and blocks allow."""
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            self.bm.take_prefix(seq)
            n = min(seq.num_tokens - seq.num_computed, budget)
            if not self.bm.append_slots(seq, n):
                self.bm.free_seq(seq)  # cached blocks stay in the prefix cache
                break
            self.waiting.popleft()
            self.bm.count_admission(seq)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
            self.running.append(seq)
            scheduled.append((seq, n))
            budget -= n
        return budget

    @staticmethod
    def scheduled(seq: Sequence, n: int) -> ScheduledSeq:
        """seq's share of a step that computes its next n tokens."""
        end = seq.num_computed + n
        sample = end == seq.num_tokens
        return ScheduledSeq(
            seq_id=seq.seq_id,
            token_ids=seq.token_slice(seq.num_computed, end),
            num_computed=seq.num_computed,
            block_table=seq.block_table,  # shared, not copied: read-only for the runner during the step
            sample=sample,
            sampling=seq.sampling,
            penalty_token_ids=seq.token_ids if sample and seq.uses_penalties else [],
            num_generated=seq.num_generated,
            matcher=seq.matcher if sample else None,
        )

    # ---- advance (the engine's overlap) ----
    def advance(self, go_on: list[Sequence], ending: list[Sequence]) -> None:
        """What update() does for the sequences of a launched step of one-token decode rows whose tokens
        are not yet on the host: one more position computed and full blocks cached for all; a placeholder
        token for those that go on (Sequence.resolve replaces it once the tokens arrive). `ending`: those
        that this token ends by length (they append it once it arrives; none is scheduled again)."""
        for seq in (*go_on, *ending):
            seq.num_computed += 1
            self.bm.cache_full_blocks(seq)
        for seq in go_on:
            seq.append_placeholder()

    # ---- update ----
    def update(self, sched: SchedulerOutput, out: ModelRunnerOutput) -> list[SeqUpdate]:
        """Advance num_computed, append sampled tokens, register newly full blocks in the prefix cache.

        Sequences that failed are reported with their error; the caller finishes them.
        """
        by_id = {seq.seq_id: seq for seq in self.running}
        updates = []
        for s in sched.seqs:
            seq = by_id.get(s.seq_id)
            if seq is None:  # finished or preempted since schedule(): nothing to record
                continue
            if s.seq_id in out.failed:
                updates.append(SeqUpdate(seq, None, out.failed[s.seq_id]))
                continue
            seq.num_computed = s.num_computed + len(s.token_ids)
            self.bm.cache_full_blocks(seq)
            token = out.sampled.get(s.seq_id) if s.sample else None
            if s.sample and token is None:
                updates.append(SeqUpdate(seq, None, "model runner returned no token"))
                continue
            if token is not None:
                seq.append_token(token)
            updates.append(SeqUpdate(seq, token))
        return updates

