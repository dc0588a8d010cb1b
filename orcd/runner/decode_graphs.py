"""CUDA graphs of the decode step: one token per sequence, one graph per batch-size bucket.

A decode step launches a few hundred small kernels; replaying them from a graph removes the CPU launch
cost (the step becomes GPU-bound). Each bucket's graph reads static input buffers and writes static
logits and greedy tokens; a step copies its inputs into the buffers, pads the batch to the bucket and
replays. The runner uses them (CUDA, triton importable, not enforce_eager) for steps where every
sequence computes exactly one token, the batch fits the largest bucket and every block table fits the
fixed width; all other steps take another executor (orcd/runner/executors.py).

Invariants:
- `scratch_block` is a KV block no sequence ever owns: the runner allocates it *past* the block
  manager's pool (KV tensors hold num_kv_blocks + 1 blocks, the block manager hands out ids
  0..num_kv_blocks-1). Padded rows write their K/V there and attend to that one slot only.
- The block-table width is fixed at capture: ceil(max_model_len / block_size) (a sequence never
  holds more blocks than that, since the engine rejects requests longer than max_model_len).
- Host inputs go through pinned buffers, one non-blocking copy per static device buffer. There are two
  sets, used in turn: a step may be launched while the one before it still runs (the engine's overlap,
  LLMEngine(overlap=True)), and a set is rewritten only after the step that last used it finished.
- `run(seqs, prev=...)` takes the input ids from the device: the sampled tokens of the step still in
  flight, so the host never waits for them before launching the next step.
- Every op of the captured step runs without host syncs, and the attention kernel's launch grid
  depends only on shapes (batch, block-table width), not on values.
"""

from __future__ import annotations

import importlib.util
import logging
import time

import torch

from orcd.engine.io import ScheduledSeq
from orcd.models.layers.attention import AttnMetadata

log = logging.getLogger(__name__)

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def graphs_supported(device: torch.device) -> bool:
    """CUDA device and triton importable (the fused kernels and the paged decode kernel need it)."""
    has_triton = importlib.util.find_spec("triton") is not None
    return device.type == "cuda" and torch.cuda.is_available() and has_triton


def buckets_for(max_num_seqs: int, buckets: tuple[int, ...] = DEFAULT_BUCKETS) -> tuple[int, ...]:
    """Buckets below max_num_seqs plus the smallest one covering it (all of them if none does)."""
    below = [b for b in buckets if b < max_num_seqs]
    cover = [b for b in buckets if b >= max_num_seqs][:1]
    return tuple(below + cover)


def table_width(max_model_len: int, block_size: int) -> int:
    return max(1, -(-max_model_len // block_size))


def fill_decode_inputs(seqs: list[ScheduledSeq], bucket: int, block_size: int, scratch_block: int,
                       rows64, table32) -> None:
    """Write one decode step into host arrays (numpy views): rows64 [4, >= bucket] int64 = ids,
    positions, slots, seq_lens; table32 [>= bucket, W] int32 block tables. Rows n..bucket-1 are
    padding: scratch slot, context of one token, table of scratch blocks. Table columns past a
    sequence's own blocks keep stale values: the attention kernel reads only blocks < seq_len."""
    n = len(seqs)
    for i, s in enumerate(seqs):
        p = s.num_computed  # the new token's position
        rows64[0, i] = s.token_ids[0]
        rows64[1, i] = p
        rows64[2, i] = s.block_table[p // block_size] * block_size + p % block_size
        rows64[3, i] = p + 1
        table32[i, : len(s.block_table)] = s.block_table
    if n < bucket:
        rows64[0:2, n:bucket] = 0
        rows64[2, n:bucket] = scratch_block * block_size
        rows64[3, n:bucket] = 1
        table32[n:bucket, :] = scratch_block


def pick_step(model: torch.nn.Module, dense=None):
    """The fused decode step for the model's blocks: QKNormDecoder where the model says
    `qk_norm_decode` (gemma3, qwen3), GptOssDecoder where it says `moe_decode` (gpt-oss), FusedDecoder
    for the qwen2/llama block (`fused_decode`), or None (the graphs replay model.forward) where none runs
    it. Imports triton: only when fusing. dense: FusedDecoder's dense weight copies (DenseWeights, made
    by the engine for qwen2/llama blocks only), or None."""
    try:
        if getattr(model, "moe_decode", False):
            from orcd.runner.fused_gpt_oss import GptOssDecoder

            return GptOssDecoder(model)
        if getattr(model, "qk_norm_decode", False):
            from orcd.runner.fused_gemma3 import QKNormDecoder

            return QKNormDecoder(model)
        from orcd.runner.fused_decode import FusedDecoder

        return FusedDecoder(model, dense=dense)
    except ValueError as err:
        log.warning("fused decode unavailable (%s): graphs replay model.forward", err)
        return None


def host_buffer(t: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host staging buffer: pinned (so copies to the device can be non-blocking) when `pin`."""
    return t.pin_memory() if pin else t


class HostStaging:
    """One set of pinned host buffers for a step's inputs: rows64 [4, bmax] int64 (ids, positions, slots,
    seq_lens), lens32 [bmax] int32, table32 [bmax, width] int32."""

    def __init__(self, bmax: int, width: int, scratch_block: int, pin: bool):
        self.rows64 = host_buffer(torch.zeros((4, bmax), dtype=torch.int64), pin)
        self.lens32 = host_buffer(torch.ones(bmax, dtype=torch.int32), pin)
        self.table32 = host_buffer(torch.full((bmax, width), scratch_block, dtype=torch.int32), pin)


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, kv, block_size: int, width: int, scratch_block: int,
                 buckets: tuple[int, ...] = DEFAULT_BUCKETS, step_fn=None):
        """kv: a KVCache with scratch_block < kv.num_blocks owned by no sequence; width: block-table
        columns. step_fn(ids, pos, meta, kv) -> logits [b, V] float32 replaces model.forward +
        compute_logits (e.g. orcd.runner.fused_decode.FusedDecoder(model))."""
        self.model, self.kv, self.block_size, self.step_fn = model, kv, block_size, step_fn
        self.buckets = tuple(sorted(buckets))
        self.scratch_block, self.width = scratch_block, width
        self.fused = step_fn is not None
        dev = kv.k[0].device
        bmax = self.buckets[-1]
        # static device inputs, sized for the largest bucket; a bucket's graph reads the first b rows
        self.ids = torch.zeros(bmax, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(bmax, dtype=torch.int64, device=dev)
        self.slots = torch.full((bmax,), scratch_block * block_size, dtype=torch.int64, device=dev)
        self.seq_lens = torch.ones(bmax, dtype=torch.int32, device=dev)
        self.tables = torch.full((bmax, width), scratch_block, dtype=torch.int32, device=dev)
        self.cu = torch.arange(bmax + 1, dtype=torch.int32, device=dev)
        # host staging for run(seqs), two sets used in turn (see the module's invariants)
        pin = dev.type == "cuda"
        self.staging = [HostStaging(bmax, width, scratch_block, pin) for _ in range(2)]
        self.stage = 0
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}  # bucket -> static [b, V] float32
        self.tokens: dict[int, torch.Tensor] = {}  # bucket -> static [b] int64 greedy tokens
        self.pool = None
        self.capture_seconds = 0.0
        self.steps = 0  # decode steps served by run()

    @classmethod
    def for_engine(cls, model: torch.nn.Module, kv, block_size: int, max_model_len: int, max_num_seqs: int,
                   scratch_block: int, fuse: bool = True, dense=None) -> DecodeGraphs:
        """The runner's graphs: pick_step's fused step as the captured one when `fuse` (model.forward if
        the model has none), buckets up to max_num_seqs, tables wide enough for max_model_len."""
        step_fn = pick_step(model, dense) if fuse else None
        return cls(model, kv, block_size, table_width(max_model_len, block_size), scratch_block,
                   buckets_for(max_num_seqs), step_fn)

    def _meta(self, b: int) -> AttnMetadata:
        return AttnMetadata(cu_seqlens_q=self.cu[: b + 1], seq_lens=self.seq_lens[:b],
                            block_tables=self.tables[:b], slot_mapping=self.slots[:b],
                            max_query_len=1, max_seq_len=self.width * self.block_size)

    def _step(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.step_fn is not None:
            logits = self.step_fn(self.ids[:b], self.pos[:b], self._meta(b), self.kv)
        else:
            hidden = self.model(self.ids[:b], self.pos[:b], self._meta(b), self.kv)
            logits = self.model.compute_logits(hidden)
        return logits, logits.argmax(dim=-1)

    @torch.inference_mode()
    def capture(self) -> float:
        """Capture every bucket, largest first, sharing one memory pool; returns the seconds it took."""
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: Triton compiles, allocator settles
            for b in self.buckets:
                self._step(b)
        torch.cuda.current_stream().wait_stream(side)
        for b in reversed(self.buckets):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self.logits[b], self.tokens[b] = self._step(b)
            self.pool = g.pool()
            self.graphs[b] = g
        torch.cuda.synchronize()
        self.capture_seconds = time.perf_counter() - t0
        return self.capture_seconds

    def bucket_for(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)

    def eligible(self, seqs: list[ScheduledSeq]) -> bool:
        """One new token per sequence, a captured bucket for the batch, block tables within the width."""
        return (0 < len(seqs) <= self.buckets[-1]
                and all(len(s.token_ids) == 1 and len(s.block_table) <= self.width for s in seqs))

    @torch.inference_mode()
    def run(self, seqs: list[ScheduledSeq], prev: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step of scheduled sequences -> (logits [n, V] float32, greedy tokens [n] int64):
        views of static buffers, valid until the next step. prev: int64 [n] on the device, the input ids
        (the tokens of the step before, not yet on the host); seqs' token_ids are then placeholders."""
        n = len(seqs)
        b = self.bucket_for(n)
        self.steps += 1
        self.stage ^= 1
        h = self.staging[self.stage]
        fill_decode_inputs(seqs, b, self.block_size, self.scratch_block, h.rows64.numpy(), h.table32.numpy())
        h.lens32[:b].copy_(h.rows64[3, :b])  # host int64 -> int32, pinned
        self.ids[:b].copy_(h.rows64[0, :b], non_blocking=True)
        if prev is not None:
            self.ids[:n].copy_(prev)  # stream order: after the step that computes prev
        self.pos[:b].copy_(h.rows64[1, :b], non_blocking=True)
        self.slots[:b].copy_(h.rows64[2, :b], non_blocking=True)
        self.seq_lens[:b].copy_(h.lens32[:b], non_blocking=True)
        self.tables[:b].copy_(h.table32[:b], non_blocking=True)
        return self._replay(b, n)

    @torch.inference_mode()
    def replay(self, ids: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, seq_lens: torch.Tensor,
               tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step from device tensors (ids/pos/slots [n], seq_lens [n] int32, tables
        [n, <= width] int32), for benchmarks and tests -> as run()."""
        n = ids.shape[0]
        b = self.bucket_for(n)
        if b is None or b not in self.graphs:
            raise ValueError(f"no decode graph for batch {n} (buckets {self.buckets})")
        self.ids[:n].copy_(ids)
        self.pos[:n].copy_(pos)
        self.slots[:n].copy_(slots)
        self.seq_lens[:n].copy_(seq_lens)
        self.tables[:n, : tables.shape[1]].copy_(tables)
        if n < b:  # padding rows: scratch slot, context of one token
            self.slots[n:b].fill_(self.scratch_block * self.block_size)
            self.seq_lens[n:b].fill_(1)
            self.tables[n:b].fill_(self.scratch_block)
        return self._replay(b, n)

    def _replay(self, b: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if b in self.graphs:
            self.graphs[b].replay()
            return self.logits[b][:n], self.tokens[b][:n]
        logits, tokens = self._step(b)  # not captured (CPU tests): the same step, eagerly, on the buffers
        return logits[:n], tokens[:n]
