"""One orcd sequence driven directly (no scheduler): prefill, eager decode, CUDA-graph decode.

The sequence owns blocks 0..W-1 in order (slot of position p = p); the last block is the scratch block
that padded graph rows write to.
"""

from __future__ import annotations

import time

import torch

from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import AttnMetadata
from orcd.runner.decode_graphs import DecodeGraphs


class OrcdSession:
    def __init__(self, path: str, num_blocks: int, page: int, device: str = "cuda"):
        self.dev = device
        self.loaded = load_model(path, device)
        self.model, self.page = self.loaded.model, page
        self.kv = KVCache.allocate(self.loaded.cfg, num_blocks, page, device, self.loaded.dtype)
        self.width = num_blocks - 1
        self.tables = torch.arange(self.width, dtype=torch.int32, device=self.dev)[None, :]
        self.vocab = self.loaded.cfg.vocab_size
        self.graphs: dict[str, DecodeGraphs] = {}  # mode -> batch-1 graphs
        self.prefill_graphs: dict[int, tuple] = {}

    @torch.inference_mode()
    def check_fused(self, depth: int, fuse_norm: bool) -> tuple[float, bool]:
        """One decode step after `depth` tokens: (|fused - eager| / |eager| of the logits, same argmax)."""
        tok = self.prefill(depth)
        meta, pos = self._meta(depth, 1)
        eager = self.model.compute_logits(self.model(tok, pos, meta, self.kv))
        from orcd.runner.fused_decode import FusedDecoder  # needs triton: CUDA only

        fused = FusedDecoder(self.model, fuse_norm=fuse_norm)(tok, pos, meta, self.kv)
        err = float((fused - eager).norm() / eager.norm())
        return err, bool((fused.argmax(-1) == eager.argmax(-1)).all())

    @torch.inference_mode()
    def prefill_graph(self, n: int, reps: int = 10) -> float:
        """tok/s of an n-token prompt whose whole forward (model.forward: dequantize + cuBLAS GEMMs, flash
        attention) is replayed from a CUDA graph captured for that length."""
        if n not in self.prefill_graphs:
            ids = torch.randint(0, self.vocab, (n,)).to(self.dev)  # token ids come from the host
            meta, pos = self._meta(0, n)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.model(ids, pos, meta, self.kv)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = self.model.compute_logits(self.model(ids, pos, meta, self.kv)[-1:]).argmax(-1)
            self.prefill_graphs[n] = (g, out)
        g, _ = self.prefill_graphs[n]
        g.replay()
        self._sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            g.replay()
        self._sync()
        return n * reps / (time.perf_counter() - t0)

    def _sync(self) -> None:
        if self.dev != "cpu":
            torch.cuda.synchronize()

    def _meta(self, start: int, n: int) -> tuple[AttnMetadata, torch.Tensor]:
        pos = torch.arange(start, start + n, device=self.dev)
        meta = AttnMetadata(
            cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32, device=self.dev),
            seq_lens=torch.tensor([start + n], dtype=torch.int32, device=self.dev),
            block_tables=self.tables, slot_mapping=pos, max_query_len=n, max_seq_len=start + n,
            cu_seqlens_q_host=[0, n], seq_lens_host=[start + n])
        return meta, pos

    @torch.inference_mode()
    def prefill(self, n: int) -> torch.Tensor:
        """A fresh n-token prompt at positions 0..n-1 -> greedy next token (device tensor)."""
        ids = torch.randint(0, self.vocab, (n,)).to(self.dev)  # token ids come from the host
        meta, pos = self._meta(0, n)
        hidden = self.model(ids, pos, meta, self.kv)
        return self.model.compute_logits(hidden[-1:]).argmax(-1)

    def first_token(self, n: int) -> int:
        return int(self.prefill(n).item())

    @torch.inference_mode()
    def decode_eager(self, depth: int, steps: int) -> float:
        """tok/s of `steps` greedy decode steps after `depth` tokens of context (eager launches)."""
        tok = self.prefill(depth) if depth else torch.zeros(1, dtype=torch.int64, device=self.dev)
        metas = [self._meta(depth + i, 1) for i in range(steps)]
        self._sync()
        t0 = time.perf_counter()
        for meta, pos in metas:
            hidden = self.model(tok, pos, meta, self.kv)
            tok = self.model.compute_logits(hidden).argmax(-1)
        self._sync()
        return steps / (time.perf_counter() - t0)

    @torch.inference_mode()
    def decode_graph(self, depth: int, steps: int, mode: str = "model") -> float:
        """tok/s of `steps` greedy decode steps replayed from the batch-1 CUDA graph of `mode`: "model"
        (model.forward), "fused" (FusedDecoder, separate norm kernels), "fused_norm" (norms in GEMVs)."""
        if mode not in self.graphs:
            from orcd.runner.fused_decode import FusedDecoder  # needs triton: CUDA only

            step_fn = None if mode == "model" else FusedDecoder(self.model, fuse_norm=mode == "fused_norm")
            graphs = DecodeGraphs(self.model, self.kv, self.page, self.width, scratch_block=self.width,
                                  buckets=(1,), step_fn=step_fn)
            graphs.capture()
            self.graphs[mode] = graphs
        graphs = self.graphs[mode]
        tok = self.prefill(depth) if depth else torch.zeros(1, dtype=torch.int64, device=self.dev)
        pos = torch.arange(depth, depth + steps, device=self.dev)
        lens = (pos + 1).to(torch.int32)
        for i in range(3):  # warm-up replays (overwritten below)
            graphs.replay(tok, pos[i:i + 1], pos[i:i + 1], lens[i:i + 1], self.tables)
        self._sync()
        t0 = time.perf_counter()
        for i in range(steps):
            _, tok = graphs.replay(tok, pos[i:i + 1], pos[i:i + 1], lens[i:i + 1], self.tables)
        self._sync()
        return steps / (time.perf_counter() - t0)

    def decode_graph_rounds(self, modes, reps: int = 2, depths=(0, 4096), steps: int = 128) -> list[dict]:
        """decode_graph for each mode at each depth, the modes alternating, `reps` times: rows
        {name, variant, depth, rep, tok_s}, each also printed."""
        rows = []
        for rep in range(reps):
            for mode in modes:
                for depth in depths:
                    rate = self.decode_graph(depth, steps, mode)
                    print(f"decode graph {mode} depth {depth}: {rate:.1f} tok/s", flush=True)
                    rows.append({"name": "decode graph", "variant": mode, "depth": depth, "rep": rep,
                                 "tok_s": rate})
        return rows
