"""Leader/follower step loop: rank 0 schedules, every rank runs its shard of the model.

Control messages go from rank 0 to all ranks with broadcast_object_list on the control group:
- ("init", num_kv_blocks | None, kv_fraction, block_size, batch_invariant): build a ModelRunner (KV cache)
  for a new engine. None blocks = each rank measures, and all take the minimum (all_reduce MIN);
  batch_invariant: the engine's policy (orcd.numerics), so every rank switches the same steps to the
  invariant kernels (the row-parallel sums then add in rank order: layers.ordered_all_reduce);
- a SchedulerOutput: run this step (the same flattened batch on every rank);
- None: stop following.
Only rank 0 samples: the others' logits (all-gathered, hence equal) are dropped, and the sampled ids
reach them as token_ids in the next step's SchedulerOutput.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
import torch.distributed as dist

from orcd.distributed.runtime import TPContext
from orcd.distributed.shard import shard_model
from orcd.engine.io import ModelRunnerOutput, SchedulerOutput
from orcd.engine.llm_engine import LLMEngine, auto_num_blocks
from orcd.loading.loader import LoadedModel, load_model, weights_nbytes
from orcd.numerics import invariant_policy
from orcd.runner.model_runner import ModelRunner

log = logging.getLogger(__name__)


def load_sharded(path, ctx: TPContext, dtype: torch.dtype | None = None,
                 keep_quantized: bool | None = None) -> LoadedModel:
    """Load the file on the host (raw blocks, not dequantized), keep this rank's shard, move it to
    ctx.device. The returned cfg is the rank-local one (its heads), so KV caches hold only those."""
    t0 = time.perf_counter()
    on_cuda = ctx.device.type == "cuda"
    dtype = dtype or (torch.bfloat16 if on_cuda else torch.float32)
    keep = on_cuda if keep_quantized is None else keep_quantized
    if ctx.world == 1:  # nothing to split: the ordinary load, straight onto the device
        return load_model(path, device=ctx.device, dtype=dtype, keep_quantized=keep_quantized)
    full = load_model(path, device="cpu", dtype=dtype, keep_quantized=True, tokenizer=ctx.rank == 0)
    local_cfg = shard_model(full.model, full.cfg, ctx.rank, ctx.world, ctx.group, ctx.device)
    if not keep:  # dense weights wanted: dequantize after sharding (each rank only its slices)
        _densify(full.model)
    if on_cuda:
        torch.cuda.synchronize(ctx.device)
    nbytes, secs = weights_nbytes(full.model), time.perf_counter() - t0
    return dataclasses.replace(full, cfg=local_cfg, device=ctx.device, weights_bytes=nbytes,
                               load_seconds=secs)


def _densify(model: torch.nn.Module) -> None:
    """Swap every raw-block QuantLinear for a dense one (a shared one, like a tied head, stays shared)."""
    from orcd.quant import QuantLinear

    done: dict[int, QuantLinear] = {}
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, QuantLinear) and child.raw is not None:
                if id(child) not in done:
                    done[id(child)] = QuantLinear(child.out_features, child.in_features, child.qtype,
                                                  child.dtype, weight=child.dense_weight(), bias=child.bias)
                setattr(mod, name, done[id(child)])


def _recv(ctx: TPContext):
    box = [None]
    dist.broadcast_object_list(box, src=0, group=ctx.control)
    return box[0]


def _send(ctx: TPContext, msg) -> None:
    dist.broadcast_object_list([msg], src=0, group=ctx.control)


def _agree_blocks(ctx: TPContext, loaded, num_kv_blocks, kv_fraction: float, block_size: int) -> int:
    """Every rank: the given count, or the minimum over ranks of what each one's free memory allows."""
    if num_kv_blocks is not None:
        return int(num_kv_blocks)
    n = torch.tensor([auto_num_blocks(loaded, kv_fraction, block_size)], dtype=torch.int64)
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=ctx.control)
    return int(n.item())


def _eager_runner(loaded, num_kv_blocks: int, block_size: int, batch_invariant: str | bool) -> ModelRunner:
    """A ModelRunner that runs every step through model.forward: fused/graph decode paths read the
    QuantLinear buffers directly and would skip the sharded model's all-reduces."""
    return ModelRunner(loaded, num_kv_blocks, block_size, decode_graphs=False,
                       batch_invariant=batch_invariant)


def _slim(sched: SchedulerOutput) -> SchedulerOutput:
    """What followers need (no penalty history: they do not sample), so the pickle stays small."""
    seqs = [dataclasses.replace(s, penalty_token_ids=[]) for s in sched.seqs]
    return SchedulerOutput(seqs, sched.num_tokens)


class TPRunner:
    """Rank 0's runner: sends each step to the followers, then runs its own shard (and samples)."""

    def __init__(self, ctx: TPContext, loaded, num_kv_blocks: int | None, kv_fraction: float,
                 block_size: int, batch_invariant: str | bool = "seeded"):
        self.ctx = ctx
        policy = invariant_policy(batch_invariant)  # a bad value fails here, before the followers hear of it
        _send(ctx, ("init", num_kv_blocks, kv_fraction, block_size, policy))
        self.num_kv_blocks = _agree_blocks(ctx, loaded, num_kv_blocks, kv_fraction, block_size)
        self.inner = _eager_runner(loaded, self.num_kv_blocks, block_size, policy)

    @property
    def kv(self):
        return self.inner.kv

    @property
    def invariant_policy(self) -> str:
        return self.inner.invariant_policy

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        if sched.empty:
            return ModelRunnerOutput(sampled={})
        _send(self.ctx, _slim(sched))
        return self.inner.execute(sched)


def leader_engine(ctx: TPContext, loaded, num_kv_blocks: int | None = None, kv_fraction: float = 0.7,
                  block_size: int = 16, batch_invariant: str | bool = "seeded", **engine_kw) -> LLMEngine:
    """Rank 0: an LLMEngine whose steps run on every rank (the followers must be in `follow`).
    Steps are eager (enforce_eager, if given, changes nothing); batch_invariant as LLMEngine's."""
    runner = TPRunner(ctx, loaded, num_kv_blocks, kv_fraction, block_size, batch_invariant)
    return LLMEngine(loaded, num_kv_blocks=runner.num_kv_blocks, block_size=block_size, runner=runner,
                     **engine_kw)


def follow(ctx: TPContext, loaded) -> int:
    """Ranks > 0: run every step rank 0 sends until it sends None; returns the number of steps run."""
    runner, steps = None, 0
    while True:
        msg = _recv(ctx)
        if msg is None:
            return steps
        if isinstance(msg, tuple) and msg[0] == "init":
            _, num_kv_blocks, kv_fraction, block_size, policy = msg
            runner = None  # free the previous engine's cache first
            n = _agree_blocks(ctx, loaded, num_kv_blocks, kv_fraction, block_size)
            runner = _eager_runner(loaded, n, block_size, policy)
            continue
        try:
            runner.forward(msg)  # logits dropped: rank 0 samples
        except Exception:  # rank 0 fails the same step on its side; keep following
            log.exception("rank %d: step failed", ctx.rank)
        steps += 1


def run_rank(ctx: TPContext, loaded, leader_fn):
    """Every rank: rank 0 returns leader_fn(engine_factory) and then releases the followers; the others
    follow until released. engine_factory(**kw) -> LLMEngine (see leader_engine)."""
    if ctx.rank != 0:
        follow(ctx, loaded)
        return None
    try:
        return leader_fn(lambda loaded_, **kw: leader_engine(ctx, loaded_, **kw))
    finally:
        _send(ctx, None)
