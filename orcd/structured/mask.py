"""The grammar mask applied to logits on their device: constrained rows only, one upload per step."""

from __future__ import annotations

import numpy as np
import torch


def bits_numpy(bitmask: torch.Tensor) -> torch.Tensor:
    """bitmask [k, W] int32 (CPU) -> [k, 32W] bool, bit j of word w at column 32w + j (~1 ms at 64 x 152k).
    Little-endian words (x86): token 32w + j is bit j % 8 of byte 4w + j // 8."""
    raw = bitmask.contiguous().view(torch.uint8)
    return torch.from_numpy(np.unpackbits(raw.numpy(), axis=1, bitorder="little")).bool()


def bits_shift(bitmask: torch.Tensor) -> torch.Tensor:
    """The same on bitmask's device in four small ops (the CUDA path): each word shifted right by
    0..31 (arithmetic shift: bit 31, the sign, comes out as 1 too), then & 1. (A 256 x 8 byte table,
    one gather, was slower on the H100: bench/structured/apply_cost.py.)"""
    k, w = bitmask.shape
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    return ((bitmask[:, :, None] >> shifts) & 1).view(k, 32 * w) != 0


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """bitmask [k, W] int32 (bit j of word w = token 32w + j allowed) -> allowed [k, vocab] bool, on the
    bitmask's device. Tokens at or past 32 * W (a model vocabulary padded beyond the tokenizer's) are
    not allowed."""
    k, w = bitmask.shape
    bits = bits_numpy(bitmask) if bitmask.device.type == "cpu" else bits_shift(bitmask)
    if 32 * w >= vocab:
        return bits[:, :vocab]
    return torch.cat([bits, bits.new_zeros(k, vocab - 32 * w)], dim=1)


def to_device(values, dev: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """values (a list, or a CPU tensor) on dev without a stream sync: on CUDA through pinned memory and a
    non-blocking copy. torch.tensor(values, device=cuda) copies from pageable memory and waits for the
    stream -- for the logits still being computed -- before the next kernel is even queued."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    return t.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else t.to(dev)


def apply_mask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """logits [N, V] with -inf at the tokens the grammar forbids in `rows` (bitmask row i masks logits row
    rows[i], rows in any order); other rows are untouched. bitmask: [len(rows), W] int32 on the CPU,
    copied to logits' device once (non-blocking when pinned: GrammarBackend.fill(pin=True)). Returns a
    new tensor when rows is non-empty."""
    if not rows:
        return logits
    dev = logits.device
    words = bitmask.to(dev, non_blocking=bitmask.is_pinned())
    if len(rows) == logits.shape[0]:  # every row: the bitmask's rows put in batch order, one `where`
        if rows != list(range(len(rows))):
            words = words[to_device(sorted(range(len(rows)), key=rows.__getitem__), dev, torch.int64)]
        return logits.where(unpack_bitmask(words, logits.shape[1]), float("-inf"))
    allowed = unpack_bitmask(words, logits.shape[1])
    idx = to_device(rows, dev, torch.int64)
    return logits.index_copy(0, idx, logits.index_select(0, idx).where(allowed, float("-inf")))
