"""The ways one step can run. ModelRunner tries its executors in order; the first that accepts the
step runs it. Each `run(seqs)` returns (tokens, the sequences they were sampled for, in order).

| executor | takes | how |
|---|---|---|
| DecodeGraphExecutor | every row a one-token decode, batch within the largest bucket | a decode CUDA graph |
| PrefillGraphExecutor | fresh prompts (or first chunks) within a prefill bucket | a prefill CUDA graph |
| SplitStepExecutor | fresh prompts beside one-token decodes (a request arriving) | one of each graph |
| EagerExecutor | anything | model.forward on flattened inputs, then sample |

DecodeGraphExecutor also launches a step without waiting for its tokens (`launch`: an InFlight, read
later), taking its input ids from the device: how the engine overlaps one step's host work with the
next step's GPU work (LLMEngine(overlap=True)).

A prefill graph that fails to capture runs its step eagerly and turns prefill graphs off for good.
Rows that ask for logprobs get them (`executor.logprobs`, seq_id -> TokenLogprobs) from the eager and
decode-graph executors, which hold the sampled rows' logits; the prefill-graph and split-step executors
decline steps holding such rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from orcd.engine.io import ModelRunnerOutput, ScheduledSeq, TokenLogprobs
from orcd.runner.decode_graphs import DecodeGraphs
from orcd.runner.logprobs import PendingLogprobs, logprobs_on_device, token_logprobs
from orcd.runner.prefill_graphs import PrefillGraphs
from orcd.runner.sampler import SampleRow, pick_tokens, sample, sample_rows

Sampled = tuple[list[int], list[ScheduledSeq]]  # (tokens, the sequences they belong to)


def launchable(seqs: list[ScheduledSeq]) -> bool:
    """Steps an executor may launch without waiting for their tokens: one-token rows that all sample.
    A step with a grammar row launches its forward only; its tokens are drawn later (GuidedInFlight)."""
    return all(s.sample and len(s.token_ids) == 1 for s in seqs)


def guided(seqs: list[ScheduledSeq]) -> bool:
    return any(s.matcher is not None for s in seqs)


def wants_logprobs(seqs: list[ScheduledSeq]) -> bool:
    return any(s.sample and s.sampling.logprobs is not None for s in seqs)


def _logprobs_of(logits: torch.Tensor, rows: list[SampleRow], tokens: torch.Tensor,
                 seqs: list[ScheduledSeq]) -> dict[int, TokenLogprobs]:
    """seq_id -> TokenLogprobs for the rows that asked (empty, and no work, when none did)."""
    if not wants_logprobs(seqs):
        return {}
    lps = token_logprobs(logits, rows, tokens)
    return {s.seq_id: lp for s, lp in zip(seqs, lps, strict=True) if lp is not None}


class EagerExecutor:
    name = "eager"

    def __init__(self, forward: Callable[..., torch.Tensor]):
        """forward(seqs, prev=None) -> logits [N, V] float32 of the sampling rows (ModelRunner.forward_seqs;
        prev: the input ids on the device, as DecodeGraphs.run's)."""
        self.forward = forward
        self.logprobs: dict[int, TokenLogprobs] = {}

    def accepts(self, seqs: list[ScheduledSeq]) -> bool:
        return True

    def run(self, seqs: list[ScheduledSeq]) -> Sampled:
        logits = self.forward(seqs)
        to_sample = [s for s in seqs if s.sample]
        if not to_sample:
            return [], []
        rows = sample_rows(to_sample)
        with torch.inference_mode():
            tokens = sample(logits, rows)
            self.logprobs = _logprobs_of(logits, rows, tokens, to_sample)
            return tokens.tolist(), to_sample

    @torch.inference_mode()
    def launch(self, seqs: list[ScheduledSeq], prev: torch.Tensor | None) -> InFlight:
        """The step, without waiting for its tokens (launchable(seqs) holds)."""
        logits = self.forward(seqs, prev)
        self.logprobs = {}
        rows = sample_rows(seqs)
        if guided(seqs):
            return GuidedInFlight(seqs, logits, rows, prev)
        tokens = sample(logits, rows, last_ids=prev)
        return InFlight(seqs, tokens, logprobs_on_device(logits, rows, tokens, prev))


class DecodeGraphExecutor:
    name = "decode_graph"

    def __init__(self, graphs: DecodeGraphs):
        self.graphs = graphs
        self.logprobs: dict[int, TokenLogprobs] = {}

    def accepts(self, seqs: list[ScheduledSeq]) -> bool:
        return self.graphs.eligible(seqs)

    @torch.inference_mode()
    def run(self, seqs: list[ScheduledSeq]) -> Sampled:
        logits, greedy = self.graphs.run(seqs)
        idx = [i for i, s in enumerate(seqs) if s.sample]
        to_sample = [seqs[i] for i in idx]
        if len(idx) != len(seqs):
            logits, greedy = logits[idx], greedy[idx]
        rows = sample_rows(to_sample)
        tokens = pick_tokens(logits, greedy, rows)
        self.logprobs = _logprobs_of(logits, rows, tokens, to_sample)
        return tokens.tolist(), to_sample

    @torch.inference_mode()
    def launch(self, seqs: list[ScheduledSeq], prev: torch.Tensor | None) -> InFlight:
        """The step, without waiting for its tokens (launchable(seqs) holds); prev: DecodeGraphs.run's."""
        logits, greedy = self.graphs.run(seqs, prev)
        self.logprobs = {}
        # the step's input ids as its graph read them (prev may view a static buffer the replay rewrote)
        last_ids = self.graphs.ids[: len(seqs)] if prev is not None else None
        rows = sample_rows(seqs)
        if guided(seqs):  # logits and greedy are the graph's buffers: drawn before its next replay
            last_ids = last_ids.clone() if last_ids is not None else None
            return GuidedInFlight(seqs, logits, rows, last_ids, greedy)
        tokens = pick_tokens(logits, greedy, rows, last_ids=last_ids)
        return InFlight(seqs, tokens, logprobs_on_device(logits, rows, tokens, last_ids))


class InFlight:
    """A launched step whose sampled tokens are still on their way to the host: `tokens` int64 [n] on the
    device (the next step's input ids), copied into pinned host memory behind an event, with the
    logprobs of the rows that asked for them."""

    def __init__(self, seqs: list[ScheduledSeq], tokens: torch.Tensor, logprobs: PendingLogprobs | None):
        self.seqs, self.tokens = seqs, tokens
        cuda = tokens.is_cuda

        def to_host(t: torch.Tensor) -> torch.Tensor:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=cuda)
            return host.copy_(t, non_blocking=cuda)

        self.host = to_host(tokens)
        self.logprobs = logprobs.moved(to_host) if logprobs is not None else None
        self.done = torch.cuda.Event() if cuda else None
        if self.done is not None:
            self.done.record()

    def draw(self) -> None:
        """The tokens are drawn at launch: nothing to do (GuidedInFlight's draws them here)."""

    def wait(self) -> ModelRunnerOutput:
        """Block until the step finished; its tokens by sequence."""
        if self.done is not None:
            self.done.synchronize()
        tokens = self.host.tolist()
        sampled = {s.seq_id: t for s, t in zip(self.seqs, tokens, strict=True)}
        if self.logprobs is None:
            return ModelRunnerOutput(sampled=sampled)
        lps = zip(self.seqs, self.logprobs.read(len(self.seqs)), strict=True)
        return ModelRunnerOutput(sampled=sampled, logprobs={s.seq_id: lp for s, lp in lps if lp is not None})


class GuidedInFlight(InFlight):
    """A launched step holding grammar rows: only its forward pass is queued at launch. Its tokens need
    each grammar advanced past the step before's token, which reaches the host after the launch (the
    engine reads it while this forward runs), so they are drawn by draw(): masks filled while the device
    still computes the logits, the step's host sync (orcd/structured/guide.py). The engine calls draw()
    before the next launch, which reads `tokens` on the device and replays the graph whose buffers hold
    these logits."""

    def __init__(self, seqs: list[ScheduledSeq], logits: torch.Tensor, rows: list[SampleRow],
                 last_ids: torch.Tensor | None, greedy: torch.Tensor | None = None):
        """logits [n, V] of the step's rows, greedy [n] their argmax (the decode graph's; None: eager),
        last_ids the step's input ids on the device (sample()'s)."""
        self.seqs, self._logits, self._rows, self._last_ids = seqs, logits, rows, last_ids
        self._greedy = greedy
        self._drawn = False

    def draw(self) -> None:
        if self._drawn:
            return
        self._drawn = True
        logits, rows, last_ids = self._logits, self._rows, self._last_ids
        with torch.inference_mode():
            if self._greedy is not None:
                tokens = pick_tokens(logits, self._greedy, rows, last_ids=last_ids)
            else:
                tokens = sample(logits, rows, last_ids=last_ids)
            lps = logprobs_on_device(logits, rows, tokens, last_ids)
        super().__init__(self.seqs, tokens, lps)

    def wait(self) -> ModelRunnerOutput:
        self.draw()
        return super().wait()


class PrefillGraphExecutor:
    name = "prefill_graph"

    def __init__(self, graphs: PrefillGraphs, eager: EagerExecutor):
        self.graphs, self.eager = graphs, eager
        self.logprobs: dict[int, TokenLogprobs] = {}  # never any: steps that want them are declined

    def accepts(self, seqs: list[ScheduledSeq]) -> bool:
        return not wants_logprobs(seqs) and self.graphs.bucket(seqs) is not None

    def run(self, seqs: list[ScheduledSeq]) -> Sampled:
        out = self.graphs.run(seqs, self.graphs.bucket(seqs))
        return self.eager.run(seqs) if out is None else out  # None: the capture failed, nothing ran


class SplitStepExecutor:
    """A step of fresh prompts (or first chunks) beside one-token decode rows -- what continuous batching
    schedules whenever a request arrives -- as two graph replays: the prompts from a prefill graph, then
    the decode rows from a decode graph. The sequences are independent (each writes and reads only its
    own blocks), so the split computes what one eager step would, at the graphs' cost (~25 ms of host
    work for a 512-token prompt eagerly)."""

    name = "split_step"

    def __init__(self, prefill: PrefillGraphExecutor, decode: DecodeGraphExecutor):
        self.prefill, self.decode = prefill, decode
        self.steps = 0
        self.logprobs: dict[int, TokenLogprobs] = {}  # never any: steps that want them are declined

    @staticmethod
    def _split(seqs: list[ScheduledSeq]) -> tuple[list[ScheduledSeq], list[ScheduledSeq]]:
        return [s for s in seqs if s.num_computed == 0], [s for s in seqs if s.num_computed > 0]

    def accepts(self, seqs: list[ScheduledSeq]) -> bool:
        fresh, decodes = self._split(seqs)
        if not (fresh and decodes) or wants_logprobs(seqs):
            return False
        return self.decode.accepts(decodes) and self.prefill.accepts(fresh)

    def run(self, seqs: list[ScheduledSeq]) -> Sampled:
        fresh, decodes = self._split(seqs)
        out = self.prefill.graphs.run(fresh, self.prefill.graphs.bucket(fresh))
        if out is None:  # the prefill capture failed: nothing ran, the whole step goes eagerly
            return self.prefill.eager.run(seqs)
        tokens, to_sample = self.decode.run(decodes)
        self.steps += 1
        return out[0] + tokens, out[1] + to_sample
