"""The grammar mask applied to logits on their device: constrained rows only, one upload per step."""

from __future__ import annotations

import numpy as np
import torch


def bits_numpy(bitmask: torch.Tensor) -> torch.Tensor:
    """bitmask [k, W] int32 (CPU) -> [k, 32W] bool, bit j of word w at column 32w + j (~1 ms at 64 x 152k).
    Little-endian words (x86): token 32w + j is bit j % 8 of byte 4w + j // 8."""
    raw = bitmask.contiguous().view(torch.uint8)
    return torch.from_numpy(np.unpackbits(raw.numpy(), axis=1, bitorder="little")).bool()


def bits_lut(bitmask: torch.Tensor) -> torch.Tensor:
    """The same on bitmask's device through a 256 x 8 table (the CUDA path): each byte of the words
    (little-endian: token 32w + 8b + j is bit j of byte b of word w) indexes its 8 bits. One gather
    writes the [k, 32W] bool result: ~10 MB moved at 64 x 152k, against ~130 MB of int32 temporaries
    for shifting each word by 0..31 (bench/structured/apply_cost.py)."""
    k, w = bitmask.shape
    dev = bitmask.device
    table = ((torch.arange(256, dtype=torch.int32, device=dev)[:, None]
              >> torch.arange(8, dtype=torch.int32, device=dev)) & 1).bool()  # [256, 8]
    return table[bitmask.contiguous().view(torch.uint8).int()].view(k, 32 * w)


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """bitmask [k, W] int32 (bit j of word w = token 32w + j allowed) -> allowed [k, vocab] bool, on the
    bitmask's device. Tokens at or past 32 * W (a model vocabulary padded beyond the tokenizer's) are
    not allowed."""
    k, w = bitmask.shape
    bits = bits_numpy(bitmask) if bitmask.device.type == "cpu" else bits_lut(bitmask)
    if 32 * w >= vocab:
        return bits[:, :vocab]
    return torch.cat([bits, bits.new_zeros(k, vocab - 32 * w)], dim=1)


def apply_mask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """logits [N, V] with -inf at the tokens the grammar forbids in `rows` (bitmask row i masks logits row
    rows[i]); other rows are untouched. bitmask: [len(rows), W] int32 on the CPU, copied to logits'
    device once (non-blocking when pinned: GrammarBackend.fill(pin=True)). Returns a new tensor when
    rows is non-empty."""
    if not rows:
        return logits
    dev = logits.device
    allowed = unpack_bitmask(bitmask.to(dev, non_blocking=bitmask.is_pinned()), logits.shape[1])
    if len(rows) == logits.shape[0]:
        return logits.where(allowed, float("-inf"))
    idx = torch.tensor(rows, device=dev)
    return logits.index_copy(0, idx, logits.index_select(0, idx).where(allowed, float("-inf")))
