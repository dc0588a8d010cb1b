"""One rank's ModelRunner under tensor parallelism, with decode CUDA graphs that hold the collectives.

The decode graphs capture fused_tp.TPFusedDecoder: the single-GPU engine's fused kernels on this
rank's slices, with each block's two all-reduces (and the embedding's all-reduce, the head's
all-gather) as NCCL kernels inside the graph, so a decode step is one replay per rank and no Python
per layer. Models it cannot run (and the batch-invariant graphs: NCCL's sum order depends on the
message size) capture model.forward instead, whose RowParallelLinear all-reduces in rank order under
the invariant kernels. Every rank captures the same buckets in the same order (same max_num_seqs and
KV size, agreed through the leader's "init" message) and picks the same executor for each step
(rank 0 names it in the step message: follower_step), so the collectives always pair up.

Prefill graphs (orcd/runner/prefill_graphs.py) capture model.forward, its row-parallel all-reduces
inside. Every rank captures every bucket at start, in the same order (capture_all with the engine's
max_num_batched_tokens, from RunnerSpec), then seals them: no capture inside a step, and a failed capture
ends the rank, as the decode graphs' does. Rank 0 names each step's executor in the step message, and
follower_step runs the same one, so the graphs replay, and the collectives pair up, on every rank.
"""

from __future__ import annotations

import logging
from collections import deque

import torch

from orcd.engine.io import SchedulerOutput
from orcd.numerics import batch_invariant_mode
from orcd.runner.decode_graphs import DecodeGraphs, buckets_for, table_width
from orcd.runner.model_runner import ModelRunner

log = logging.getLogger(__name__)


class TPModelRunner(ModelRunner):
    """ModelRunner whose decode graphs replay the TP fused step (collectives inside) and whose prefill
    graphs are all captured at start."""

    prefill_strict = True  # a rank going eager alone would leave the others' collectives unpaired

    def __init__(self, loaded, num_kv_blocks: int, block_size: int, *, decode_graphs: bool,
                 max_num_seqs: int, batch_invariant: str | bool, rank: int = 0, group=None,
                 all_reduce: str = "nccl", prefill_tokens: int = 0):
        """prefill_tokens: the engine's max_num_batched_tokens, the largest step the prefill graphs must
        hold (0: no prefill graphs; they also need decode graphs, as on one GPU)."""
        self.num_kv_blocks = num_kv_blocks  # the block manager's; with graphs the cache holds one more
        self.all_reduce = all_reduce  # TPFusedDecoder's residual all-reduce: "nccl" or "symm"
        self.rank, self.group = rank, group  # read by _capture, which the base __init__ calls
        super().__init__(loaded, num_kv_blocks, block_size, decode_graphs=decode_graphs,
                         prefill_graphs=prefill_tokens > 0, max_num_seqs=max_num_seqs,
                         batch_invariant=batch_invariant)
        if self.prefill_graphs is not None:
            done = self.prefill_graphs.capture_all(prefill_tokens)
            self.prefill_graphs.seal()
            log.info("rank %d: captured %d prefill graphs in %.2f s", rank, len(done),
                     self.prefill_graphs.warm_seconds)

    def step_fn(self, invariant: bool):
        """The captured decode step: TPFusedDecoder, or None (model.forward) for the invariant graphs
        and shards it cannot run. The same answer on every rank (it depends on the model's shapes and
        types only), so all ranks capture the same collectives."""
        if invariant:
            return None
        from orcd.distributed.fused_tp import TPFusedDecoder  # imports triton: CUDA graphs only
        from orcd.distributed.layers import VocabParallelEmbedding
        from orcd.runner.fused_decode import FusedDecoder

        try:
            if not isinstance(self.model.embed, VocabParallelEmbedding):  # one rank: nothing was split
                return FusedDecoder(self.model)
            return TPFusedDecoder(self.model, self.rank, self.group, all_reduce=self.all_reduce)
        except ValueError as err:
            log.warning("fused decode unavailable under TP (%s): graphs replay model.forward", err)
            return None

    def _capture(self, max_model_len: int, max_num_seqs: int, scratch_block: int,
                 invariant: bool) -> DecodeGraphs:
        """No fallback to eager on failure (unlike the single-GPU runner): a rank that stayed eager
        while the others replay would leave their collectives unpaired, so the error ends the rank
        (and the launcher ends the others)."""
        with batch_invariant_mode(self.invariant_layers, invariant):
            width = table_width(max_model_len, self.block_size)
            graph = DecodeGraphs(self.model, self.kv, self.block_size, width, scratch_block,
                                 buckets_for(max_num_seqs), self.step_fn(invariant))
            secs = graph.capture()
        log.info("rank %d: captured %d decode graphs (%s%s) in %.2f s", self.rank, len(graph.buckets),
                 "fused" if graph.fused else "model.forward", ", batch-invariant" if invariant else "", secs)
        return graph


@torch.inference_mode()
def follower_step(runner: TPModelRunner, sched: SchedulerOutput, prev: torch.Tensor | None = None,
                  executor: str = "eager") -> str:
    """A follower's part of one step: the executor rank 0's runner picked (its name: executors.py),
    logits dropped (rank 0 samples). prev: the input ids on the device (rank 0's launch() of an overlapped
    step broadcasts them); sched's token_ids are then placeholders. Returns the executor's name. Nothing
    waits for the device here (StepFence, in driver.follow, does)."""
    invariant = runner.step_is_invariant(sched)
    graph = runner.graph_invariant if invariant else runner.graph
    runner.set_invariant(invariant)
    seqs = sched.seqs
    if executor == "decode_graph":
        graph.run(seqs, prev)
    elif executor == "prefill_graph":
        _prefill(runner, seqs)
    elif executor == "split_step":  # as SplitStepExecutor: the fresh prompts' graph, then the decodes'
        _prefill(runner, [s for s in seqs if s.num_computed == 0])
        graph.run([s for s in seqs if s.num_computed > 0])
    else:
        runner.forward_seqs(seqs, prev)
    return executor


def _prefill(runner: TPModelRunner, seqs: list) -> None:
    graphs = runner.prefill_graphs
    graphs.forward(seqs, graphs.bucket(seqs))


class StepFence:
    """Keeps a follower's host at most one step ahead of its device. DecodeGraphs.run stages a step's
    inputs in one of two pinned host buffers, taking turns, so step j's may be written once step j - 2
    is done with them; rank 0's engine keeps the same bound by reading step j - 1's tokens before it
    launches step j + 1. Off CUDA a step is done when it returns."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.done: deque = deque()  # one CUDA event per step still in flight, oldest first

    def before_step(self) -> None:
        while len(self.done) > 1:
            self.done.popleft().synchronize()

    def after_step(self) -> None:
        if self.cuda:
            event = torch.cuda.Event()
            event.record()
            self.done.append(event)
