"""One rank's ModelRunner under tensor parallelism, with decode CUDA graphs that hold the collectives.

The single-GPU runner replays graphs of the fused decode step (orcd.runner.fused_decode), which reads
the QuantLinear buffers directly and so would skip the sharded model's all-reduces. Here the decode
graphs capture model.forward instead: each block's two row-parallel all-reduces (and the embedding's
all-reduce, the head's all-gather) are NCCL kernels inside the graph, so a decode step is one replay
per rank and no Python per layer. Every rank captures the same buckets in the same order (same
max_num_seqs and KV size, agreed through the leader's "init" message) and picks the same executor for
each step (follower_step mirrors ModelRunner.executors), so the collectives always pair up.

Prefill graphs stay off: they are captured lazily, on a step's first use of a bucket, which would need
every rank to take the same decision at the same step; prompts run eagerly (two all-reduces per block).
"""

from __future__ import annotations

import torch

from orcd.engine.io import SchedulerOutput
from orcd.numerics import batch_invariant_mode
from orcd.runner.decode_graphs import DecodeGraphs
from orcd.runner.model_runner import ModelRunner


class TPModelRunner(ModelRunner):
    """ModelRunner whose decode graphs capture model.forward (collectives inside); no prefill graphs."""

    def __init__(self, loaded, num_kv_blocks: int, block_size: int, *, decode_graphs: bool,
                 max_num_seqs: int, batch_invariant: str | bool):
        self.num_kv_blocks = num_kv_blocks  # the block manager's; with graphs the cache holds one more
        super().__init__(loaded, num_kv_blocks, block_size, decode_graphs=decode_graphs, prefill_graphs=False,
                         max_num_seqs=max_num_seqs, batch_invariant=batch_invariant)

    def _capture(self, max_model_len: int, max_num_seqs: int, scratch_block: int,
                 invariant: bool) -> DecodeGraphs:
        """No fallback to eager on failure (unlike the single-GPU runner): a rank that stayed eager
        while the others replay would leave their collectives unpaired, so the error ends the rank
        (and the launcher ends the others)."""
        with batch_invariant_mode(self.invariant_layers, invariant):
            graph = DecodeGraphs.for_engine(self.model, self.kv, self.block_size, max_model_len,
                                            max_num_seqs, scratch_block, fuse=False)
            graph.capture()
        return graph


@torch.inference_mode()
def follower_step(runner: TPModelRunner, sched: SchedulerOutput) -> str:
    """A follower's part of one step: the executor rank 0's runner picks for it (decode graph when
    eligible, else eager), logits dropped (rank 0 samples). Returns the executor's name."""
    invariant = runner.step_is_invariant(sched)
    graph = runner.graph_invariant if invariant else runner.graph
    runner.set_invariant(invariant)
    if graph is not None and graph.eligible(sched.seqs):
        graph.run(sched.seqs)
        name = "decode_graph"
    else:
        runner.forward_seqs(sched.seqs)
        name = "eager"
    if runner.device.type == "cuda":  # host staging buffers are rewritten by the next step
        torch.cuda.current_stream(runner.device).synchronize()
    return name
