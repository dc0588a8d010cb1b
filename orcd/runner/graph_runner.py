"""The engine's fast decode path: decode-only steps replayed from CUDA graphs of FusedDecoder.

ModelRunner uses it (CUDA, triton importable, not enforce_eager) for steps where every scheduled
sequence computes exactly one token, the batch fits the largest captured bucket and every block table
fits the fixed width; all other steps (prefill, mixed, CPU) take the eager model.forward path.

Invariants:
- `scratch_block` is a KV block no sequence ever owns: the runner allocates it *past* the block
  manager's pool (KV tensors hold num_kv_blocks + 1 blocks, the block manager hands out ids
  0..num_kv_blocks-1), so padded graph rows write their K/V there and nowhere else.
- The block-table width is fixed at capture: ceil(max_model_len / block_size) (a sequence never
  holds more blocks than that, since the engine rejects requests longer than max_model_len).
- Host inputs go through pinned buffers, one non-blocking copy per static device buffer; they are
  rewritten only after the previous step synchronized (the runner reads the sampled tokens back).
"""

from __future__ import annotations

import importlib.util
import logging
import time

import torch

from orcd.engine.io import ScheduledSeq
from orcd.runner.cuda_graphs import DEFAULT_BUCKETS, DecodeGraphs

log = logging.getLogger(__name__)


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


class GraphDecoder:
    def __init__(self, model: torch.nn.Module, kv, block_size: int, max_model_len: int, max_num_seqs: int,
                 scratch_block: int, fuse: bool = True):
        """fuse: FusedDecoder as the captured step (falls back to model.forward if the model has no
        fused kernels); kv: the runner's KVCache, scratch_block < kv.num_blocks owned by no sequence."""
        self.block_size, self.scratch_block = block_size, scratch_block
        self.width = table_width(max_model_len, block_size)
        step_fn = None
        if fuse:
            try:
                from orcd.runner.fused_decode import FusedDecoder  # imports triton: only when fusing

                step_fn = FusedDecoder(model)
            except ValueError as err:
                log.warning("fused decode unavailable (%s): graphs replay model.forward", err)
        self.fused = step_fn is not None
        self.graphs = DecodeGraphs(model, kv, self.width, block_size, scratch_block,
                                   buckets=buckets_for(max_num_seqs), step_fn=step_fn)
        self.buckets = self.graphs.buckets
        bmax = self.buckets[-1]
        pin = kv.k[0].device.type == "cuda"
        self.h64 = _host(torch.zeros((4, bmax), dtype=torch.int64), pin)  # ids, pos, slots, seq_lens
        self.h32 = _host(torch.full((bmax, self.width), scratch_block, dtype=torch.int32), pin)
        self.h_lens = _host(torch.ones(bmax, dtype=torch.int32), pin)
        self.capture_seconds = 0.0
        self.steps = 0  # decode steps served by run()

    def capture(self) -> float:
        t0 = time.perf_counter()
        self.graphs.capture()
        self.capture_seconds = time.perf_counter() - t0
        return self.capture_seconds

    def eligible(self, seqs: list[ScheduledSeq]) -> bool:
        """One new token per sequence, a captured bucket for the batch, block tables within the width."""
        return (0 < len(seqs) <= self.buckets[-1]
                and all(len(s.token_ids) == 1 and len(s.block_table) <= self.width for s in seqs))

    @torch.inference_mode()
    def run(self, seqs: list[ScheduledSeq]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (logits [n, V] float32, greedy tokens [n] int64): views of static buffers, valid until the
        next run."""
        n = len(seqs)
        g = self.graphs
        b = g.bucket_for(n)
        self.steps += 1
        fill_decode_inputs(seqs, b, self.block_size, self.scratch_block, self.h64.numpy(), self.h32.numpy())
        self.h_lens[:b].copy_(self.h64[3, :b])  # host int64 -> int32, pinned
        g.ids[:b].copy_(self.h64[0, :b], non_blocking=True)
        g.pos[:b].copy_(self.h64[1, :b], non_blocking=True)
        g.slots[:b].copy_(self.h64[2, :b], non_blocking=True)
        g.seq_lens[:b].copy_(self.h_lens[:b], non_blocking=True)
        g.tables[:b].copy_(self.h32[:b], non_blocking=True)
        if b in g.graphs:
            g.graphs[b].replay()
            return g.logits[b][:n], g.tokens[b][:n]
        logits, tokens = g._step(b)  # not captured (CPU tests): the same step, eagerly, on the buffers
        return logits[:n], tokens[:n]


def _host(t: torch.Tensor, pin: bool) -> torch.Tensor:
    return t.pin_memory() if pin else t
