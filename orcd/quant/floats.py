"""F32, F16, BF16: reinterpret the bytes (block size 1)."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.registry import register


@register(Q.F32)
def _f32(blocks: torch.Tensor) -> torch.Tensor:
    return blocks.contiguous().view(torch.float32).clone()


@register(Q.F16)
def _f16(blocks: torch.Tensor) -> torch.Tensor:
    return blocks.contiguous().view(torch.float16).float()


@register(Q.BF16)
def _bf16(blocks: torch.Tensor) -> torch.Tensor:
    return blocks.contiguous().view(torch.bfloat16).float()  # exact: bf16 is the top half of an f32
