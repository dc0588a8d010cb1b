"""Tensor-parallel building blocks over orcd.quant's QuantLinear / QuantEmbedding.

- `slice_rows`: column-parallel linear (Q/K/V, gate, up; vocabulary rows): a rank keeps output rows
  [r0, r1). Any GGML type works: each row is quantized on its own.
- `slice_cols` + `RowParallelLinear`: o_proj and down keep input columns [c0, c1) and all-reduce their
  partial sums (in rank order under batch-invariant mode). Quantized rows are cut at block boundaries
  only (c0, c1 multiples of the block size).
- `VocabParallelEmbedding` / `VocabParallelHead`: vocabulary rows split over ranks; the embedding
  all-reduces (one rank holds each id's row, the others add zeros), the head all-gathers the logits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from orcd.distributed.partition import TensorParallelError
from orcd.quant import QuantEmbedding, QuantLinear
from orcd.quant.registry import get_format


def _own(t: torch.Tensor | None, device: torch.device | None) -> torch.Tensor | None:
    """A compact private copy on `device` (so the full tensor's storage can be freed)."""
    if t is None:
        return None
    t = t.contiguous()  # a column slice is compacted here, on its current device
    moved = t.to(device) if device is not None else t
    return moved.clone() if moved.data_ptr() == t.data_ptr() else moved  # never a view of the full one


def _gguf_rows(m: QuantLinear) -> None:
    if m.layout != "gguf":  # orcd/loading/q6k_layout.py: the split layout's rows are not W's rows
        raise TensorParallelError("tensor parallelism slices GGUF rows: load with q6k_layout='gguf'")


def slice_rows(m: QuantLinear, r0: int, r1: int, device: torch.device | None = None) -> QuantLinear:
    """Output rows [r0, r1) of W [out, in] (and of the bias) as a new QuantLinear on `device`."""
    _gguf_rows(m)
    w = _own(m.weight[r0:r1], device) if m.weight is not None else None
    raw = _own(m.raw[r0:r1], device) if m.raw is not None else None
    bias = _own(m.bias[r0:r1], device) if m.bias is not None else None
    return QuantLinear(r1 - r0, m.in_features, m.qtype, m.dtype, weight=w, raw=raw, bias=bias)


def slice_cols(m: QuantLinear, c0: int, c1: int, name: str, keep_bias: bool,
               device: torch.device | None = None) -> QuantLinear:
    """Input columns [c0, c1) of W [out, in] as a new QuantLinear; `name` (the GGUF tensor) goes into the
    error when the cut is not on a block boundary of the tensor's type (checked for dense-held too)."""
    _gguf_rows(m)
    fmt = get_format(m.qtype)
    bs = fmt.block_size
    if c0 % bs or c1 % bs:
        raise TensorParallelError(
            f"{name}: input columns [{c0}, {c1}) of this rank do not fall on {m.qtype.name} block boundaries "
            f"(block size {bs}); use fewer ranks or a file with another type for this tensor")
    w = _own(m.weight[:, c0:c1], device) if m.weight is not None else None
    raw = None
    if m.raw is not None:  # raw [out, row_bytes]: block j is bytes [j * type_size, (j + 1) * type_size)
        raw = _own(m.raw[:, c0 // bs * fmt.type_size : c1 // bs * fmt.type_size], device)
    bias = _own(m.bias, device) if keep_bias and m.bias is not None else None
    return QuantLinear(m.out_features, c1 - c0, m.qtype, m.dtype, weight=w, raw=raw, bias=bias)


def ordered_all_reduce(y: torch.Tensor, group) -> torch.Tensor:
    """The sum over ranks of y, added in rank order: each element's result does not depend on y's size.
    (NCCL and gloo pick a ring/tree schedule and chunking by message size, so with more than 2 ranks
    their all-reduce may add one element's partial sums in an order that depends on the batch.)"""
    parts = [torch.empty_like(y) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, y, group=group)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_local @ W_local.T): x holds this rank's input columns; the bias is on rank 0 only.
    With batch_invariant on (orcd.numerics.batch_invariant_mode) the sum is ordered_all_reduce."""

    batch_invariant = False

    def __init__(self, inner: QuantLinear, group):
        super().__init__()
        self.inner, self.group = inner, group
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_local] -> [..., out], the same on every rank."""
        y = self.inner(x).contiguous()  # collectives need dense tensors (NCCL refuses strided ones)
        if self.batch_invariant:
            return ordered_all_reduce(y, self.group)
        dist.all_reduce(y, group=self.group)
        return y


class VocabParallelEmbedding(nn.Module):
    """Rows [v0, v1) of the token table; ids outside give zeros, and the all-reduce sums one row in."""

    def __init__(self, table: QuantEmbedding, v0: int, v1: int, group):
        super().__init__()
        self.local, self.v0, self.v1, self.group = table, v0, v1, group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] int64 (global) -> [T, H] in the model dtype."""
        mine = (ids >= self.v0) & (ids < self.v1)
        local_ids = torch.where(mine, ids - self.v0, torch.zeros_like(ids))
        out = self.local(local_ids)
        out = torch.where(mine[..., None], out, torch.zeros_like(out))
        dist.all_reduce(out, group=self.group)
        return out

    def as_linear(self) -> QuantLinear:
        return self.local.as_linear()


class VocabParallelHead(nn.Module):
    """LM head over rows [v0, v1) of the vocabulary; all-gathers every rank's logits into [N, V]."""

    def __init__(self, inner: QuantLinear, splits: list[tuple[int, int]], rank: int, group):
        super().__init__()
        self.inner, self.splits, self.rank, self.group = inner, splits, rank, group
        self.width = max(b - a for a, b in splits)  # all_gather wants equal sizes: pad to the widest
        self.out_features = splits[-1][1]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [N, H] -> logits [N, V] (same on every rank), in the inner dtype."""
        return self.gather(self.inner(h))

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """This rank's logits [N, v1 - v0] -> every rank's, [N, V] (all-gather, padded to the widest)."""
        n, pad = local.shape[0], self.width - local.shape[1]
        if pad:
            local = torch.cat((local, local.new_zeros(n, pad)), dim=1)
        parts = [torch.empty_like(local) for _ in self.splits]
        dist.all_gather(parts, local.contiguous(), group=self.group)
        return torch.cat([p[:, : b - a] for p, (a, b) in zip(parts, self.splits, strict=True)], dim=1)
