"""A decode step of R rows (one token for each of R sequences at `depth`), FusedDecoder captured in a
CUDA graph as the engine runs it: ms per step and tok/s from graph replays, then the replays under
torch.profiler, kernels grouped by name (µs per step). step_profile.py's --rows runs this.

Each switch set (a FusedDecoder keyword: batched_qkv off / on) gets its own graph on the same model and
KV cache, so the rows of one call compare like with like.
"""

from __future__ import annotations

import torch
from kernel_table import kernel_rows
from torch.profiler import ProfilerActivity, profile

from orcd.models.layers.attention import AttnMetadata


def blocks_needed(rows: int, depth: int, page: int) -> int:
    """KV pages for `rows` sequences of depth + 1 tokens (+1: DecodeGraphs' scratch block convention)."""
    return rows * (depth // page + 1) + 1


def step_inputs(rows: int, depth: int, page: int, vocab: int, dev: str) -> tuple:
    """(ids [R], pos [R], meta): R sequences, each its own pages, the new token at position depth."""
    per = depth // page + 1
    tables = torch.arange(rows * per, dtype=torch.int32, device=dev).view(rows, per)
    pos = torch.full((rows,), depth, dtype=torch.int64, device=dev)
    slots = tables[:, depth // page].long() * page + depth % page
    meta = AttnMetadata(cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32, device=dev),
                        seq_lens=(pos + 1).int(), block_tables=tables, slot_mapping=slots, max_query_len=1,
                        max_seq_len=depth + 1)
    ids = torch.randint(100, vocab - 100, (rows,), device=dev, generator=torch.Generator(dev).manual_seed(0))
    return ids, pos, meta


@torch.inference_mode()
def capture(step, kv, ids, pos, meta) -> torch.cuda.CUDAGraph:
    """One decode step of `step` (a FusedDecoder) captured; run twice first (Triton compiles, split-K
    counters allocated outside the capture)."""
    for _ in range(2):
        step(ids, pos, meta, kv)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(ids, pos, meta, kv)
    return g


def replay_ms(g: torch.cuda.CUDAGraph, reps: int) -> float:
    """Mean ms per replay over `reps` back-to-back replays (after 3 warm-up replays)."""
    for _ in range(3):
        g.replay()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(reps):
        g.replay()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / reps


def profile_rows(model, kv, page: int, vocab: int, rows: int, depth: int, reps: int,
                 switches: dict[str, dict]) -> list[dict]:
    """For each named switch set: {"rows", "switch", "ms_per_step", "tok_s", "kernel_us_per_step",
    "kernels"} of an R-row step."""
    from orcd.runner.fused_decode import FusedDecoder  # needs triton: CUDA only

    ids, pos, meta = step_inputs(rows, depth, page, vocab, "cuda")
    out = []
    for name, kw in switches.items():
        g = capture(FusedDecoder(model, **kw), kv, ids, pos, meta)
        ms = replay_ms(g, reps)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                g.replay()
            torch.cuda.synchronize()
        us, kernels = kernel_rows(prof, reps, "step", 90)
        out.append({"rows": rows, "switch": name, "ms_per_step": ms, "tok_s": rows * 1e3 / ms,
                    "kernel_us_per_step": us, "kernels": kernels})
        del g
    return out
