"""CUDA graphs of the decode step: one token per sequence, one graph per batch-size bucket.

A decode step launches a few hundred small kernels; replaying them from a graph removes the CPU launch
cost (the step becomes GPU-bound). Each bucket's graph reads static input buffers and writes static
logits; `run` copies a step's inputs into the buffers, pads the batch to the bucket, replays.
Padded rows write their K/V into `scratch_slot` (a cache slot no sequence owns: the caller reserves
one block) and attend to that one slot, so they never touch a real sequence's cache.

Requirements met by the model here: every op in forward/compute_logits runs without host syncs, and
the attention backend's launch grid depends only on shapes (batch, block-table width), not values.
"""

from __future__ import annotations

import torch

from orcd.models.layers.attention import AttnMetadata

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, kv, max_blocks_per_seq: int, block_size: int,
                 scratch_block: int, buckets: tuple[int, ...] = DEFAULT_BUCKETS, step_fn=None):
        """step_fn(ids, pos, meta, kv) -> logits [b, V] float32 replaces model forward + compute_logits
        (e.g. orcd.runner.fused_decode.FusedDecoder(model))."""
        self.model, self.kv, self.block_size, self.step_fn = model, kv, block_size, step_fn
        self.buckets = tuple(sorted(buckets))
        self.scratch_block = scratch_block
        dev = kv.k[0].device
        bmax, w = self.buckets[-1], max_blocks_per_seq
        # static inputs, sized for the largest bucket; a bucket's graph reads the first b rows
        self.ids = torch.zeros(bmax, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(bmax, dtype=torch.int64, device=dev)
        self.slots = torch.full((bmax,), scratch_block * block_size, dtype=torch.int64, device=dev)
        self.seq_lens = torch.ones(bmax, dtype=torch.int32, device=dev)
        self.tables = torch.full((bmax, w), scratch_block, dtype=torch.int32, device=dev)
        self.cu = torch.arange(bmax + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}  # bucket -> static [b, V] float32
        self.tokens: dict[int, torch.Tensor] = {}  # bucket -> static [b] int64 greedy tokens
        self.pool = None

    def _meta(self, b: int) -> AttnMetadata:
        w = self.tables.shape[1]
        return AttnMetadata(cu_seqlens_q=self.cu[: b + 1], seq_lens=self.seq_lens[:b],
                            block_tables=self.tables[:b], slot_mapping=self.slots[:b],
                            max_query_len=1, max_seq_len=w * self.block_size)

    def _step(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.step_fn is not None:
            logits = self.step_fn(self.ids[:b], self.pos[:b], self._meta(b), self.kv)
        else:
            hidden = self.model(self.ids[:b], self.pos[:b], self._meta(b), self.kv)
            logits = self.model.compute_logits(hidden)
        return logits, logits.argmax(dim=-1)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, sharing one memory pool."""
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

    def bucket_for(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)

    @torch.inference_mode()
    def run(self, ids: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, seq_lens: torch.Tensor,
            tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step for n sequences (device tensors: ids/pos/slots [n], seq_lens [n] int32,
        tables [n, <= max_blocks] int32) -> (logits [n, V] float32, greedy tokens [n]), views of static
        buffers valid until the next run."""
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
        self.graphs[b].replay()
        return self.logits[b][:n], self.tokens[b][:n]
