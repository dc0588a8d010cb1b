"""The grammar mask applied to logits on their device: constrained rows only, one upload per step."""

from __future__ import annotations

import torch


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """bitmask [k, W] int32 (bit j of word w = token 32w + j allowed) -> allowed [k, vocab] bool, on the
    bitmask's device. Tokens at or past 32 * W (a model vocabulary padded beyond the tokenizer's) are
    not allowed."""
    k, w = bitmask.shape
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = ((bitmask[:, :, None] >> shifts) & 1).bool().reshape(k, 32 * w)
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
    idx = torch.tensor(rows, device=dev)
    out = logits.clone()
    out[idx] = logits[idx].masked_fill(~allowed, float("-inf"))
    return out
