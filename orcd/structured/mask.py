"""The grammar mask applied to logits on their device: constrained rows only, one upload per step."""

from __future__ import annotations

import numpy as np
import torch


def bits_numpy(raw: torch.Tensor) -> torch.Tensor:
    """raw [k, B] uint8 (CPU) -> [k, 8B] bool, bit j of byte b at column 8b + j (~1 ms at 64 x 152k)."""
    return torch.from_numpy(np.unpackbits(raw.numpy(), axis=1, bitorder="little")).bool()


def bits_table(raw: torch.Tensor) -> torch.Tensor:
    """The same on raw's device: one 256-entry table lookup per byte (the CUDA path)."""
    table = (torch.arange(256, device=raw.device)[:, None] >> torch.arange(8, device=raw.device)) & 1
    return table.bool()[raw.long()].reshape(raw.shape[0], -1)


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """bitmask [k, W] int32 (bit j of word w = token 32w + j allowed) -> allowed [k, vocab] bool, on the
    bitmask's device. Tokens at or past 32 * W (a model vocabulary padded beyond the tokenizer's) are
    not allowed."""
    k, w = bitmask.shape
    # bytes of the little-endian words (x86, CUDA): token 32w + j is bit j % 8 of byte 4w + j // 8
    raw = bitmask.contiguous().view(torch.uint8)
    bits = bits_numpy(raw) if raw.device.type == "cpu" else bits_table(raw)
    if 32 * w >= vocab:
        return bits[:, :vocab]
    return torch.cat([bits, bits.new_zeros(k, vocab - 32 * w)], dim=1)


def apply_mask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """logits [N, V] with -inf at the tokens the grammar forbids in `rows` (bitmask row i masks logits row
    rows[i]); other rows are untouched. bitmask: [len(rows), W] int32 on the CPU, copied to logits'
    device once (non-blocking from pinned memory on CUDA). Returns a new tensor when rows is non-empty."""
    if not rows:
        return logits
    dev = logits.device
    if dev.type == "cuda":
        bitmask = bitmask.pin_memory()
    allowed = unpack_bitmask(bitmask.to(dev, non_blocking=True), logits.shape[1])
    if len(rows) == logits.shape[0]:
        return logits.masked_fill(~allowed, float("-inf"))
    idx = torch.tensor(rows, device=dev)
    return logits.index_copy(0, idx, logits.index_select(0, idx).masked_fill(~allowed, float("-inf")))
