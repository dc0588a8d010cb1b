"""One-shot all-reduce of a decode step's small residual over NVLink peer loads (torch symmetric memory).

A TP decode step all-reduces a [B, hidden] bf16 stream twice per block (16 KiB at B=1 on the 72B). NCCL
takes 15-18 us per call inside a CUDA graph on 2 H100s (bench/results/tp_allreduce_h100x4.json), mostly
latency. torch.ops.symm_mem.one_shot_all_reduce_out has every rank read all peers' copies of the message
straight from their memory (one kernel: barrier on signal pads, then loads and the sum). Multicast
(NVLS, multimem_*) stays off (runtime.RANK_ENV): only plain peer loads are used.

Buffers: two symmetric buffers of max_numel each, used alternately by call position (slot 0 for the
o_proj all-reduce, slot 1 for ffn_down's), so a rank never refills a buffer a peer may still be reading:
call k+2 refills slot k%2 only after this rank passed call k+1's barrier, which every peer enters only
after finishing call k. Messages larger than max_numel, or a failed setup, fall back to NCCL.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


class SymmAllReduce:
    """In-place sum over the group of a bf16/fp16/fp32 tensor of at most max_numel elements."""

    def __init__(self, max_numel: int, dtype: torch.dtype, device: torch.device, group=None):
        import torch.distributed._symmetric_memory as symm_mem

        self.group = group
        self.name = (group or dist.group.WORLD).group_name
        self.bufs = [symm_mem.empty(max_numel, dtype=dtype, device=device) for _ in range(2)]
        for b in self.bufs:
            symm_mem.rendezvous(b, self.name)

    def __call__(self, x: torch.Tensor, slot: int) -> None:
        """x (contiguous) <- sum over ranks of x; slot in {0, 1}: alternate between consecutive calls."""
        n = x.numel()
        buf = self.bufs[slot]
        if n > buf.numel() or x.dtype != buf.dtype:
            dist.all_reduce(x, group=self.group)
            return
        src = buf[:n]
        src.copy_(x.view(-1))
        torch.ops.symm_mem.one_shot_all_reduce_out(src, "sum", self.name, x.view(-1))


def make_all_reduce(kind: str, max_numel: int, dtype: torch.dtype, device: torch.device, group=None):
    """kind "nccl" -> None (the caller uses dist.all_reduce); "symm" -> a SymmAllReduce, or None with a
    warning where symmetric memory is unavailable (CPU, no peer access, an older torch). Every rank must
    get the same answer: the caller agrees on it (TPFusedDecoder._agree)."""
    if kind == "nccl":
        return None
    if kind != "symm":
        raise ValueError(f"all-reduce kind {kind!r}: expected 'nccl' or 'symm'")
    if device.type != "cuda":
        log.warning("symmetric-memory all-reduce needs CUDA (device %s): NCCL/gloo instead", device)
        return None
    try:
        return SymmAllReduce(max_numel, dtype, device, group)
    except (RuntimeError, ImportError, AttributeError) as err:
        log.warning("symmetric-memory all-reduce unavailable (%s): NCCL instead", err)
        return None
