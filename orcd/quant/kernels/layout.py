"""GGUF block layout of the types the kernels read raw: read-only tables keyed by GGMLQuantizationType."""

from __future__ import annotations

from types import MappingProxyType

import torch
from gguf import GGMLQuantizationType as Q

BLOCK_SIZE = MappingProxyType({Q.Q8_0: 32, Q.Q5_0: 32, Q.Q4_K: 256, Q.Q6_K: 256})  # inputs per block
TYPE_SIZE = MappingProxyType({Q.Q8_0: 34, Q.Q5_0: 22, Q.Q4_K: 144, Q.Q6_K: 210})  # bytes per block


def row_bytes(qtype: Q | int, in_features: int) -> int:
    """Bytes of one weight row of `in_features` inputs (a whole number of blocks)."""
    return in_features // BLOCK_SIZE[qtype] * TYPE_SIZE[qtype]


# Q6_K "split" layout (issue 16, opt-in): the same bytes as GGUF's [out, nb * 210], rearranged so every
# block's ql | qh | scales (208 bytes, offsets inside a block unchanged) starts 16-byte aligned: data
# [out, nb, 208] row-major first (row r's block b at byte (r * nb + b) * 208), then the d's fp16
# [out, nb] (block (r, b)'s d at byte out * nb * 208 + (r * nb + b) * 2). Same shape and dtype as the
# GGUF tensor, but its rows are no longer the weight's rows: nothing may slice or gather them.
Q6K_DATA = 208  # bytes of a block without its d


def split_q6_k(raw: torch.Tensor) -> torch.Tensor:
    """GGUF Q6_K uint8 [out, nb * 210] -> the split layout, a new tensor of the same shape and dtype."""
    out = raw.shape[0]
    b = raw.reshape(out, -1, 210)
    return torch.cat([b[:, :, :Q6K_DATA].reshape(-1), b[:, :, Q6K_DATA:].reshape(-1)]).view(raw.shape)


def unsplit_q6_k(raw: torch.Tensor) -> torch.Tensor:
    """The split layout uint8 [out, nb * 210] -> GGUF's Q6_K blocks, a new tensor of the same shape."""
    out, nbytes = raw.shape[0], raw.numel()
    nb = nbytes // out // 210
    flat = raw.reshape(-1)
    data = flat[: out * nb * Q6K_DATA].view(out, nb, Q6K_DATA)
    d = flat[out * nb * Q6K_DATA:].view(out, nb, 2)
    return torch.cat([data, d], dim=2).view(raw.shape)


def q6k_tail(raw: torch.Tensor) -> torch.Tensor:
    """The d's of a split Q6_K tensor: fp16 [out * nb], a view (starts 16-byte aligned when raw does)."""
    nb = raw.numel() // raw.shape[0] // 210
    return raw.reshape(-1)[raw.shape[0] * nb * Q6K_DATA:].view(torch.float16)


def q6k_views(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A split Q6_K tensor as the kernels' three pointers (p8, p16, p32) with SPLIT on: the bytes, the
    d's fp16 [out * nb] in p16's place, the 208-byte blocks as int32 words."""
    nb = raw.numel() // raw.shape[0] // 210
    return raw, q6k_tail(raw), raw.reshape(-1)[: raw.shape[0] * nb * Q6K_DATA].view(torch.int32)
