"""Leader/follower step loop: rank 0 schedules, every rank runs its shard of the model.

Control messages go from rank 0 to all ranks with broadcast_object_list on the control group:
- ("init", RunnerSpec): build a runner (KV cache, decode graphs) for a new engine. num_kv_blocks None =
  each rank measures, and all take the minimum (all_reduce MIN); batch_invariant: the engine's policy
  (orcd.numerics), so every rank switches the same steps to the invariant kernels (the row-parallel sums
  then add in rank order: layers.ordered_all_reduce); decode_graphs / max_num_seqs: every rank captures
  the same decode graphs, collectives inside (tp_runner.py);
- ("step", rows, num_tokens, prev, executor): run this step (the SchedulerOutput in plain tuples, _slim)
  on the executor rank 0 picked (its name: decode or prefill graph, split step, eager), so every rank
  replays the same graphs. prev True: an overlapped step (TPRunner.launch,
  LLMEngine(overlap=True)); its input ids, the step before's tokens still on rank 0's device, come next
  by a broadcast on the tensor group (NCCL on CUDA), and the rows' token_ids are placeholders;
- None: stop following.
Only rank 0 samples: the others' logits (all-gathered, hence equal) are dropped, and the sampled ids
reach them as token_ids in the next step's SchedulerOutput, or by that broadcast for an overlapped step.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
import torch.distributed as dist

from orcd.distributed.fused_tp import split_readers
from orcd.distributed.mapped import load_mapped
from orcd.distributed.runtime import TPContext
from orcd.distributed.shard import shard_model
from orcd.distributed.tp_runner import StepFence, TPModelRunner, follower_step
from orcd.engine.io import ModelRunnerOutput, ScheduledSeq, SchedulerOutput
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.engine.sizing import auto_num_blocks
from orcd.errors import LoadOptionError
from orcd.loading.loader import LoadedModel, load_model, weights_nbytes
from orcd.loading.q6k_layout import check_q6k_layout, split_q6k
from orcd.numerics import invariant_policy
from orcd.quant.kernels import require_kernel_triton

log = logging.getLogger(__name__)


def load_sharded(path, ctx: TPContext, dtype: torch.dtype | None = None,
                 keep_quantized: bool | None = None, tokenizer: bool = True,
                 q6k_layout: str = "auto") -> LoadedModel:
    """Map the file on the host (raw blocks, not dequantized, not copied: mapped.py), keep this rank's
    shard, copy it to ctx.device. The returned cfg is the rank-local one (its heads), so KV caches hold
    only those.
    tokenizer: rank 0 builds the file's tokenizer (the others never do).
    q6k_layout: "auto" (on CUDA with raw weights, the shard's Q6_K weights that its fused decode step
    reads split are rearranged after slicing: fused_tp.split_readers) or "gguf" (the file's blocks);
    "split" (every Q6_K weight) only at world 1, where this is load_model (orcd/loading/q6k_layout.py)."""
    t0 = time.perf_counter()
    on_cuda = ctx.device.type == "cuda"
    dtype = dtype or (torch.bfloat16 if on_cuda else torch.float32)
    keep = on_cuda if keep_quantized is None else keep_quantized
    if ctx.world == 1:  # nothing to split: the ordinary load, straight onto the device
        return load_model(path, device=ctx.device, dtype=dtype, keep_quantized=keep_quantized,
                          tokenizer=tokenizer, q6k_layout=q6k_layout)
    require_kernel_triton(ctx.device)
    layout = check_tp_q6k_layout(q6k_layout, ctx.device, keep)  # before the load
    full = load_mapped(path, dtype, tokenizer=tokenizer and ctx.rank == 0)  # raw blocks: mmap views
    local_cfg = shard_model(full.model, full.cfg, ctx.rank, ctx.world, ctx.group, ctx.device)
    if not keep:  # dense weights wanted: dequantize after sharding (each rank only its slices)
        _densify(full.model)
    if layout == "auto":  # after slicing: the split layout's rows are not W's rows
        with torch.no_grad():
            split_q6k(full.model, split_readers(full.model))
    if on_cuda:
        torch.cuda.synchronize(ctx.device)
    nbytes, secs = weights_nbytes(full.model), time.perf_counter() - t0
    return dataclasses.replace(full, cfg=local_cfg, device=ctx.device, weights_bytes=nbytes,
                               load_seconds=secs)


def check_tp_q6k_layout(layout: str, device: torch.device, keep_quantized: bool) -> str:
    """The layout a rank of a world > 1 applies after slicing: "auto" or "gguf" (check_q6k_layout's answer
    for this device and weights). LoadOptionError for "split": the TP step hands the Q6_K weights its
    int8 kernels do not read to the float GEMVs, which read GGUF blocks only."""
    if layout == "split":
        raise LoadOptionError("q6k_layout='split' is for one GPU: under tensor parallelism 'auto' (the "
                              "default) splits the Q6_K weights each rank's decode step reads, 'gguf' none")
    return check_q6k_layout(layout, device, keep_quantized)


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


@dataclasses.dataclass(frozen=True)
class RunnerSpec:
    """What every rank needs to build the same runner for an engine."""

    num_kv_blocks: int | None
    kv_fraction: float
    block_size: int
    batch_invariant: str  # a policy of orcd.numerics
    decode_graphs: bool  # CUDA graphs of model.forward for decode steps (ignored off CUDA)
    max_num_seqs: int  # the engine's: the largest decode graph bucket
    prefill_tokens: int = 0  # the engine's max_num_batched_tokens, for the prefill graphs (0: none)


def _build_runner(ctx: TPContext, loaded, spec: RunnerSpec) -> TPModelRunner:
    """Every rank, together: agree on the KV size, then allocate the cache and capture the graphs
    (the TP fused decode step, collectives inside: tp_runner.py)."""
    n = _agree_blocks(ctx, loaded, spec.num_kv_blocks, spec.kv_fraction, spec.block_size)
    return TPModelRunner(loaded, n, spec.block_size, decode_graphs=spec.decode_graphs,
                         max_num_seqs=spec.max_num_seqs, batch_invariant=spec.batch_invariant,
                         rank=ctx.rank, group=ctx.group, all_reduce=ctx.all_reduce,
                         prefill_tokens=spec.prefill_tokens)


# What a follower needs of a sequence's sampling: only whether it has a seed (orcd.numerics' "seeded"
# policy switches the step's kernels on it). Followers never sample.
_PLAIN, _SEEDED = SamplingParams(), SamplingParams(seed=0)


def _slim(sched: SchedulerOutput, executor: str, prev: bool = False) -> tuple:
    """A step as followers need it, in plain tuples and lists (pickled ~7x faster than the dataclasses,
    on rank 0's path before every step): ("step", [(seq_id, token_ids, num_computed, block_table,
    sample, seeded)], num_tokens, prev, executor)."""
    return ("step", [(s.seq_id, s.token_ids, s.num_computed, s.block_table, s.sample,
                      s.sampling.seed is not None) for s in sched.seqs], sched.num_tokens, prev, executor)


def _unslim(msg: tuple) -> SchedulerOutput:
    _, rows, num_tokens, _prev, _executor = msg
    return SchedulerOutput([ScheduledSeq(i, ids, c, table, sample, _SEEDED if seeded else _PLAIN)
                            for i, ids, c, table, sample, seeded in rows], num_tokens)


class TPRunner:
    """Rank 0's runner: sends each step to the followers, then runs its own shard (and samples)."""

    def __init__(self, ctx: TPContext, loaded, spec: RunnerSpec):
        self.ctx = ctx
        _send(ctx, ("init", spec))
        self.inner = _build_runner(ctx, loaded, spec)
        self.num_kv_blocks = self.inner.num_kv_blocks  # the block manager's (+1 scratch block in the cache)

    @property
    def kv(self):
        return self.inner.kv

    @property
    def graph(self):
        return self.inner.graph

    @property
    def prefill_graphs(self):
        """The prefill graphs, captured and sealed on every rank already (LLMEngine.warm_up_graphs
        finds nothing left to capture)."""
        return self.inner.prefill_graphs

    @property
    def steps_by_executor(self) -> dict[str, int]:
        return self.inner.steps_by_executor

    @property
    def invariant_policy(self) -> str:
        return self.inner.invariant_policy

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        if sched.empty:
            return ModelRunnerOutput(sampled={})
        executor = self.inner.pick(sched)
        _send(self.ctx, _slim(sched, executor.name))
        return self.inner.execute(sched, executor)

    def launch(self, sched: SchedulerOutput, prev: torch.Tensor | None = None):
        """ModelRunner.launch on every rank (the engine's overlap, orcd/engine/overlap.py): the step goes
        to the followers, then prev (int64 [rows] on the device: the step before's tokens, not yet on
        the host) by a broadcast on the tensor group, in stream order after the step that computes them.
        None, with nothing sent, for a step launch() would not start."""
        executor = self.inner.launcher(sched)
        if executor is None:
            return None
        _send(self.ctx, _slim(sched, executor.name, prev is not None))
        if prev is not None:
            prev = prev.contiguous()
            dist.broadcast(prev, src=0, group=self.ctx.group)
        return self.inner.start(executor, sched, prev)


def leader_engine(ctx: TPContext, loaded, num_kv_blocks: int | None = None, kv_fraction: float = 0.7,
                  block_size: int = 16, batch_invariant: str | bool = "seeded", enforce_eager: bool = False,
                  max_num_seqs: int = 64, **engine_kw) -> LLMEngine:
    """Rank 0: an LLMEngine whose steps run on every rank (the followers must be in `follow`).
    Options as LLMEngine's; enforce_eager: no CUDA graphs. Prefill graphs (engine_kw prefill_graphs,
    default on) are captured by every rank here, for steps of up to max_num_batched_tokens."""
    policy = invariant_policy(batch_invariant)  # a bad value fails here, before the followers hear of it
    prefill_tokens = 0  # no prefill graphs
    if engine_kw.get("prefill_graphs", True):
        prefill_tokens = engine_kw.get("max_num_batched_tokens", 2048)
    spec = RunnerSpec(num_kv_blocks, kv_fraction, block_size, policy, not enforce_eager, max_num_seqs,
                      prefill_tokens)
    runner = TPRunner(ctx, loaded, spec)
    return LLMEngine(loaded, num_kv_blocks=runner.num_kv_blocks, block_size=block_size, runner=runner,
                     max_num_seqs=max_num_seqs, **engine_kw)


def follow(ctx: TPContext, loaded) -> int:
    """Ranks > 0: run every step rank 0 sends until it sends None; returns the number of steps run."""
    runner, steps = None, 0
    fence = StepFence(ctx.device)
    while True:
        msg = _recv(ctx)
        if msg is None:
            return steps
        if isinstance(msg, tuple) and msg[0] == "init":
            runner = None  # free the previous engine's cache (and graphs) first
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
            runner = _build_runner(ctx, loaded, msg[1])
            continue
        fence.before_step()
        try:
            # logits dropped: rank 0 samples
            follower_step(runner, _unslim(msg), _recv_prev(ctx, msg), executor=msg[4])
        except Exception:  # rank 0 fails the same step on its side; keep following
            log.exception("rank %d: step failed", ctx.rank)
        fence.after_step()
        steps += 1


def _recv_prev(ctx: TPContext, msg: tuple) -> torch.Tensor | None:
    """An overlapped step's input ids, broadcast by rank 0 (TPRunner.launch); None for other steps."""
    if not msg[3]:
        return None
    prev = torch.empty(len(msg[1]), dtype=torch.int64, device=ctx.device)
    dist.broadcast(prev, src=0, group=ctx.group)
    return prev


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
