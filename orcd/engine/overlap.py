"""The engine's overlap: while the device computes decode step k + 1, the host reads step k's tokens and
turns them into events (LLMEngine(overlap=True), the default).

step() launches a step of one-token decode rows without waiting for its tokens (ModelRunner.launch ->
an InFlight). The next step() checks that the same sequences are still running (nothing waits, no
abort), advances those that k's token does not end by length with a placeholder token each
(Scheduler.advance), schedules and launches step k + 1 for them with input ids taken from k's tokens on
the device, and only then waits for k's tokens, which replace the placeholders (Sequence.resolve) and
become events. A sequence that k's token ends (a stop token or string, EOS) has a row in k + 1 that is
computed and dropped: it writes one K/V slot of a block it no longer owns, before any later step can
reuse that block (one stream, in order). Prefill steps, and runners without `launch`, run one at a time;
tensor-parallel runners launch too (orcd/distributed/driver.py, TPRunner.launch: rank 0 broadcasts the
input ids from its device to the other ranks).

Steps with grammar rows overlap too, one phase later: launching k + 1 queues only its forward pass
(executors.GuidedInFlight); k's tokens then advance the grammars (Sequence.resolve) while it runs, and
the next step() draws k + 1's tokens (masks filled while the device still computes the logits, the
grammar's host sync) before it launches k + 2. The device waits for that draw, not for the events.

A mixin of LLMEngine: it uses the engine's scheduler, runner, requests and _apply/_run/_failed.
"""

from __future__ import annotations

import torch

from orcd.engine.io import ModelRunnerOutput, SchedulerOutput, TokenEvent
from orcd.engine.sequence import Sequence


class OverlapSteps:
    def _launch(self, sched: SchedulerOutput, prev) -> bool:
        """Launch sched without waiting for its tokens (ModelRunner.launch); False where it cannot run so."""
        launch = getattr(self.runner, "launch", None)
        inflight = launch(sched, prev) if launch is not None else None
        if inflight is not None:
            self._inflight = (sched, inflight)
            self.overlapped_steps += prev is not None
        return inflight is not None

    def _step_overlapped(self, sched: SchedulerOutput, inflight) -> list[TokenEvent]:
        """Step k (sched) is in flight. If its sequences are all still running and nothing else waits,
        step k + 1 is scheduled for those that k's token does not end by length and launched first, its
        input ids taken from k's tokens on the device, and k's tokens are read after: the GPU never waits
        for the host's work on k. Otherwise k is read and applied as _run's."""
        self._inflight = None
        try:
            inflight.draw()  # grammar rows' tokens (GuidedInFlight), before anything reads them
        except Exception as err:  # noqa: BLE001 - as _run's failures
            return self._apply(sched, self._failed(sched, err))
        running = self._continuing(sched)
        if running is None:
            return self._apply(sched, self._wait(inflight, sched))
        go_on: list[Sequence] = []  # k's token leaves room for more
        ending: list[Sequence] = []  # k's token is the last max_tokens allows
        for seq in running:
            (go_on if seq.num_generated + 1 < seq.sampling.max_tokens else ending).append(seq)
        self.scheduler.advance(go_on, ending)
        nxt = self.scheduler.schedule()  # go_on only (a preempted one drops out), in order
        advanced = {seq.seq_id for seq in go_on}
        launched = False
        if not nxt.empty:
            self.counters["steps"] += 1
            try:
                launched = self._launch(nxt, self._rows_of(inflight, sched, nxt))
            except Exception as err:  # noqa: BLE001 - as _run's failures
                events = self._resolve(sched, self._wait(inflight, sched), advanced)
                return events + self._apply(nxt, self._failed(nxt, err))
        events = self._resolve(sched, self._wait(inflight, sched), advanced)
        if not launched and not nxt.empty:  # run it now, from the known tokens
            fresh = [self._by_seq[s.seq_id].seq for s in nxt.seqs if s.seq_id in self._by_seq]
            nxt = SchedulerOutput([self.scheduler.scheduled(seq, 1) for seq in fresh], len(fresh))
            events += self._run(nxt) if fresh else []
        return events

    def _continuing(self, sched: SchedulerOutput) -> list[Sequence] | None:
        """The running sequences, when they are exactly sched's, in order, nothing waits and no abort is
        pending; else None."""
        running = self.scheduler.running
        if self.scheduler.waiting or self._aborts or len(running) != len(sched.seqs):
            return None
        if any(seq.seq_id != s.seq_id for s, seq in zip(sched.seqs, running, strict=True)):
            return None
        return list(running)

    @staticmethod
    def _rows_of(inflight, sched: SchedulerOutput, nxt: SchedulerOutput):
        """nxt's input ids on the device: inflight's tokens in nxt's row order."""
        row = {s.seq_id: i for i, s in enumerate(sched.seqs)}
        idx = [row[s.seq_id] for s in nxt.seqs]
        if idx == list(range(len(idx))):
            return inflight.tokens[: len(idx)]
        return inflight.tokens.index_select(0, torch.tensor(idx, device=inflight.tokens.device))

    def _wait(self, inflight, sched: SchedulerOutput) -> ModelRunnerOutput:
        try:
            return inflight.wait()
        except Exception as err:  # noqa: BLE001 - as _run's failures
            return self._failed(sched, err)

    def _resolve(self, sched: SchedulerOutput, result: ModelRunnerOutput, advanced: set[int]
                 ) -> list[TokenEvent]:
        """Step k's tokens replace the placeholders Scheduler.advance left (sequences in `advanced`) or are
        appended (those that k's token ends by length); their events."""
        events = []
        for s in sched.seqs:
            out = self._by_seq.get(s.seq_id)
            if out is None:
                continue
            if s.seq_id in result.failed:
                if s.seq_id in advanced:
                    out.seq.output_token_ids.pop()  # the placeholder
                events.append(self._finish(out, "error", error=result.failed[s.seq_id]))
                continue
            token = result.sampled[s.seq_id]
            if s.seq_id in advanced:
                out.seq.resolve(token)
            else:
                out.seq.append_token(token)
            event = self._on_token(out, token)
            event.logprobs = result.logprobs.get(s.seq_id)  # None unless the request asked
            events.append(event)
        return events
