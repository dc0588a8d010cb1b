"""ModelRunner: SchedulerOutput -> one of the executors (orcd/runner/executors.py) -> sampled tokens.

The runner owns the KV cache tensors and the CUDA graphs, and picks how each step runs: the first
executor that accepts it (decode graph, prefill graph, split step, else eager model.forward). Block
bookkeeping (which block holds what) is the scheduler's; the runner trusts each ScheduledSeq's
block_table and num_computed.
"""

from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass

import torch

from orcd.engine.io import ModelRunnerOutput, ScheduledSeq, SchedulerOutput
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import AttnMetadata
from orcd.numerics import batch_invariant_mode, invariant_layers, invariant_policy, set_batch_invariant
from orcd.runner.decode_graphs import DecodeGraphs, graphs_supported
from orcd.runner.executors import (
    DecodeGraphExecutor,
    EagerExecutor,
    InFlight,
    PrefillGraphExecutor,
    SplitStepExecutor,
    launchable,
)
from orcd.runner.prefill_graphs import PrefillGraphs

log = logging.getLogger(__name__)


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    attn: AttnMetadata
    sample_rows: torch.Tensor  # [N] int64: row of hidden whose logits are sampled (last of each chunk)


def prepare_inputs(sched: SchedulerOutput, block_size: int, device: torch.device) -> StepInputs:
    """Flatten every sequence's chunk; build slot_mapping and padded block tables (host, then one copy)."""
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    cu = [0]
    seq_lens: list[int] = []
    sample_rows: list[int] = []
    for s in sched.seqs:
        n, c = len(s.token_ids), s.num_computed
        ids.extend(s.token_ids)
        pos.extend(range(c, c + n))
        for j in range(c // block_size, (c + n + block_size - 1) // block_size):  # blocks this chunk writes
            shift = (s.block_table[j] - j) * block_size  # position p of block j -> slot p + shift
            slots.extend(range(max(c, j * block_size) + shift, min(c + n, (j + 1) * block_size) + shift))
        cu.append(cu[-1] + n)
        seq_lens.append(s.num_computed + n)
        if s.sample:
            sample_rows.append(cu[-1] - 1)
    width = max(len(s.block_table) for s in sched.seqs)
    tables = [s.block_table + [0] * (width - len(s.block_table)) for s in sched.seqs]

    def t(x: list, dtype: torch.dtype) -> torch.Tensor:
        if x and isinstance(x[0], int):  # flat ints: array -> tensor is ~3x faster than torch.tensor(list)
            return torch.frombuffer(array("q", x), dtype=torch.int64).to(dtype).to(device, non_blocking=True)
        return torch.tensor(x, dtype=dtype).to(device, non_blocking=True)

    attn = AttnMetadata(
        cu_seqlens_q=t(cu, torch.int32), seq_lens=t(seq_lens, torch.int32),
        block_tables=t(tables, torch.int32), slot_mapping=t(slots, torch.int64),
        max_query_len=max(cu[i + 1] - cu[i] for i in range(len(seq_lens))), max_seq_len=max(seq_lens),
        cu_seqlens_q_host=cu, seq_lens_host=seq_lens,
    )
    return StepInputs(t(ids, torch.int64), t(pos, torch.int64), attn, t(sample_rows, torch.int64))


class ModelRunner:
    prefill_strict = False  # a failed prefill-graph capture turns the graphs off (TPModelRunner: raises)

    def __init__(self, loaded, num_kv_blocks: int, block_size: int, *, decode_graphs: bool = False,
                 prefill_graphs: bool = True, max_num_seqs: int = 64, max_model_len: int | None = None,
                 batch_invariant: str | bool = "off", dense=None):
        """decode_graphs: on CUDA with triton, capture decode-only steps as CUDA graphs of the fused
        decode step (orcd.runner.decode_graphs) now; the KV cache then holds one extra block past the
        block manager's ids 0..num_kv_blocks-1, the scratch block padded graph rows write to.
        Elsewhere (CPU, no triton) the flag is ignored and every step runs eagerly.
        prefill_graphs: with decode graphs, fresh-prompt steps replay prefill graphs captured lazily per
        bucket (orcd.runner.prefill_graphs); fp16/bf16 only (fp32 attention loops over sequences on the
        host), never batch-invariant (its attention kernel is not known capturable padded).
        batch_invariant (orcd.numerics.invariant_policy): which steps run the batch-invariant kernels, with
        which a row's tokens do not depend on the rest of the batch, at a cost in speed
        (docs/performance.md): "off", "seeded" (steps holding a sequence with a seed) or "all". Their
        decode graphs capture model.forward under those kernels, beside the fused ones.
        dense: orcd.runner.dense_weights.DenseWeights for the fused decode step (FusedDecoder(dense=)), or
        None."""
        self.dense = dense
        self.invariant_policy = invariant_policy(batch_invariant)
        self.loaded = loaded
        self.model = loaded.model
        self.invariant_layers = invariant_layers(loaded.model)  # switched per step (orcd.numerics)
        self.device = loaded.device
        self.block_size = block_size
        self.graph: DecodeGraphs | None = None  # decode graphs of the fast (fused) step
        self.graph_invariant: DecodeGraphs | None = None  # ... of model.forward, batch-invariant kernels
        self.prefill_graphs: PrefillGraphs | None = None
        self.steps_by_executor: dict[str, int] = {}
        use_graphs = decode_graphs and graphs_supported(torch.device(loaded.device))
        extra = 1 if use_graphs else 0  # the scratch block, index num_kv_blocks
        self.kv = KVCache.allocate(loaded.cfg, num_kv_blocks + extra, block_size, loaded.device, loaded.dtype)
        if not use_graphs:
            return
        max_len = max_model_len or min(loaded.cfg.context_length, num_kv_blocks * block_size)
        if self.invariant_policy != "all":
            self.graph = self._capture(max_len, max_num_seqs, num_kv_blocks, invariant=False)
        if self.invariant_policy != "off":
            self.graph_invariant = self._capture(max_len, max_num_seqs, num_kv_blocks, invariant=True)
        if (prefill_graphs and self.invariant_policy != "all"
                and loaded.dtype in (torch.float16, torch.bfloat16)):
            self.prefill_graphs = PrefillGraphs(self.model, self.kv, block_size, num_kv_blocks, max_num_seqs,
                                                strict=self.prefill_strict)

    def _capture(self, max_model_len: int, max_num_seqs: int, scratch_block: int,
                 invariant: bool) -> DecodeGraphs | None:
        """Capture decode graphs; on failure (e.g. out of memory) log it and return None (stay eager)."""
        try:
            with batch_invariant_mode(self.invariant_layers, invariant):
                graph = DecodeGraphs.for_engine(self.model, self.kv, self.block_size, max_model_len,
                                                max_num_seqs, scratch_block, fuse=not invariant,
                                                dense=self.dense)
                secs = graph.capture()
        except Exception as err:  # noqa: BLE001 - any capture failure: stay eager, keep serving
            log.warning("CUDA graph capture failed, decoding eagerly: %s", str(err).splitlines()[0])
            torch.cuda.empty_cache()
            return None
        log.info("captured %d decode CUDA graphs (batch %s, %s%s, block table width %d) in %.2f s",
                 len(graph.buckets), ",".join(map(str, graph.buckets)),
                 "fused" if graph.fused else "model.forward", ", batch-invariant" if invariant else "",
                 graph.width, secs)
        return graph

    @property
    def split_steps(self) -> int:
        """Steps run as a prefill graph + a decode graph (SplitStepExecutor)."""
        return self.steps_by_executor.get(SplitStepExecutor.name, 0)

    def executors(self, invariant: bool) -> list:
        """This step's executors in the order they are tried (the last, eager, accepts every step)."""
        eager = EagerExecutor(self.forward_seqs)
        graph = self.graph_invariant if invariant else self.graph
        decode = DecodeGraphExecutor(graph) if graph is not None else None
        prefill = None
        if not invariant and self.prefill_graphs is not None:
            prefill = PrefillGraphExecutor(self.prefill_graphs, eager)
        split = SplitStepExecutor(prefill, decode) if prefill and decode else None
        return [e for e in (decode, prefill, split) if e is not None] + [eager]

    def step_is_invariant(self, sched: SchedulerOutput) -> bool:
        """Whether this step runs the batch-invariant kernels (policy "seeded": any seeded sequence)."""
        if self.invariant_policy == "seeded":
            return any(s.sampling.seed is not None for s in sched.seqs)
        return self.invariant_policy == "all"

    @property
    def invariant_now(self) -> bool:
        """What the model's layers are set to now, read from them, never copied here: the layers belong
        to the model, and every engine on it switches them (one whose last step was batch-invariant leaves
        them on for the next engine built on the same model, or for one stepping beside it)."""
        return bool(self.invariant_layers) and self.invariant_layers[0].batch_invariant

    def set_invariant(self, on: bool) -> None:
        """Set the model's layers to the batch-invariant kernels (or back) when the step needs the other."""
        if on != self.invariant_now:
            set_batch_invariant(self.invariant_layers, on)

    @torch.inference_mode()
    def forward(self, sched: SchedulerOutput) -> torch.Tensor:
        """Run the model on one step; returns logits [N, V] float32 of the rows with sample=True."""
        self.set_invariant(self.step_is_invariant(sched))
        return self.run(prepare_inputs(sched, self.block_size, self.device))

    @torch.inference_mode()
    def forward_seqs(self, seqs: list[ScheduledSeq], prev: torch.Tensor | None = None) -> torch.Tensor:
        """forward() of these sequences, with the batch-invariant setting execute() chose. prev: int64
        [len(seqs)] on the device, the input ids of one-token rows whose token_ids are placeholders."""
        inp = prepare_inputs(SchedulerOutput(seqs, sum(len(s.token_ids) for s in seqs)),
                             self.block_size, self.device)
        if prev is not None:
            inp.input_ids.copy_(prev)
        return self.run(inp)

    def run(self, inp: StepInputs) -> torch.Tensor:
        """Device work only (no host syncs on the decode path): the hook a CUDA-graph runner replaces."""
        hidden = self.model(inp.input_ids, inp.positions, inp.attn, self.kv)
        return self.model.compute_logits(hidden[inp.sample_rows])

    def launch(self, sched: SchedulerOutput, prev: torch.Tensor | None = None) -> InFlight | None:
        """Start the step and return before its tokens reach the host (the engine reads them with
        InFlight.wait() after launching the next step), or None for a step that cannot run so
        (executors.launchable). prev: the input ids on the device (the step before's InFlight.tokens, in
        sched's row order); sched's token_ids are then placeholders."""
        executor = self.launcher(sched)
        return None if executor is None else self.start(executor, sched, prev)

    def start(self, executor, sched: SchedulerOutput, prev: torch.Tensor | None) -> InFlight:
        """launch() on the executor launcher(sched) gave (the TP leader picks it before telling the ranks)."""
        self.set_invariant(self.step_is_invariant(sched))
        inflight = executor.launch(sched.seqs, prev)
        self.steps_by_executor[executor.name] = self.steps_by_executor.get(executor.name, 0) + 1
        return inflight

    def launcher(self, sched: SchedulerOutput):
        """The executor that launch() would start sched on, or None where launch() returns None."""
        if sched.empty or not launchable(sched.seqs):
            return None
        executor = self.pick(sched)
        return executor if hasattr(executor, "launch") else None

    def pick(self, sched: SchedulerOutput):
        """The executor execute() runs a non-empty sched on: the first of executors() that accepts it."""
        return next(e for e in self.executors(self.step_is_invariant(sched)) if e.accepts(sched.seqs))

    def execute(self, sched: SchedulerOutput, executor=None) -> ModelRunnerOutput:
        """Run one step and sample. executor: pick(sched)'s answer when the caller has it already (the TP
        leader names it to the other ranks first)."""
        if sched.empty:
            return ModelRunnerOutput(sampled={})
        executor = executor or self.pick(sched)
        self.set_invariant(self.step_is_invariant(sched))
        try:
            tokens, to_sample = executor.run(sched.seqs)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as err:  # a failed step fails its sequences
            log.exception("model step failed")
            msg = f"model step failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            return ModelRunnerOutput(sampled={}, failed={s.seq_id: msg for s in sched.seqs})
        self.steps_by_executor[executor.name] = self.steps_by_executor.get(executor.name, 0) + 1
        return ModelRunnerOutput(sampled={s.seq_id: tok for s, tok in zip(to_sample, tokens, strict=True)},
                                 logprobs=executor.logprobs)
