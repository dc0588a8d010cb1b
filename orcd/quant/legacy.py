"""Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 32-element blocks with one fp16 scale (and a min for the _1 types).

Element j < 16 of a 4/5-bit block is the low nibble of byte j, element 16 + j the high nibble.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.registry import f16, register


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """qs uint8 [n, 16] -> uint8 [n, 32]: low nibbles then high nibbles."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=1)


def _high_bits(blocks: torch.Tensor, offset: int) -> torch.Tensor:
    """The 32-bit little-endian qh at `offset` -> uint8 [n, 32] of bit j << 4."""
    qh = blocks[:, offset : offset + 4].contiguous().view(torch.int32)  # [n, 1]
    bits = torch.arange(32, dtype=torch.int32, device=blocks.device).reshape(1, 32)  # a kernel, no copy
    return (((qh >> bits) & 1) << 4).to(torch.uint8)


@register(Q.Q4_0)
def _q4_0(blocks: torch.Tensor) -> torch.Tensor:
    q = _nibbles(blocks[:, 2:18]).to(torch.int16) - 8
    return f16(blocks, 0) * q.float()


@register(Q.Q4_1)
def _q4_1(blocks: torch.Tensor) -> torch.Tensor:
    q = _nibbles(blocks[:, 4:20]).float()
    return f16(blocks, 0) * q + f16(blocks, 2)


@register(Q.Q5_0)
def _q5_0(blocks: torch.Tensor) -> torch.Tensor:
    q = (_nibbles(blocks[:, 6:22]) | _high_bits(blocks, 2)).to(torch.int16) - 16
    return f16(blocks, 0) * q.float()


@register(Q.Q5_1)
def _q5_1(blocks: torch.Tensor) -> torch.Tensor:
    q = (_nibbles(blocks[:, 8:24]) | _high_bits(blocks, 4)).float()
    return f16(blocks, 0) * q + f16(blocks, 2)


@register(Q.Q8_0)
def _q8_0(blocks: torch.Tensor) -> torch.Tensor:
    q = blocks[:, 2:34].contiguous().view(torch.int8).float()
    return q * f16(blocks, 0)

