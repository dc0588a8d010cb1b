"""dequantize(raw, qtype, shape): GGUF bytes -> float32 tensor on the bytes' device."""

from __future__ import annotations

import math

import torch
from gguf import GGMLQuantizationType

from orcd.errors import GGUFError
from orcd.quant.registry import get_format

CHUNK_ELEMENTS = 1 << 24  # bounds the float32 temporaries of one call (~64 MiB per intermediate)


def _blocks(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    fmt = get_format(qtype)
    n = math.prod(shape)
    if raw.dtype != torch.uint8:
        raise TypeError(f"raw GGUF data must be uint8, got {raw.dtype}")
    if n % fmt.block_size or raw.numel() != n // fmt.block_size * fmt.type_size:
        raise GGUFError(f"{fmt.qtype.name} data of {raw.numel()} bytes does not hold shape {tuple(shape)}")
    return raw.reshape(-1, fmt.type_size)


def dequantize(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    """raw: uint8 bytes ([rows, row_bytes] or flat) -> float32 tensor of `shape` on raw's device."""
    blocks = _blocks(raw, qtype, tuple(shape))
    return get_format(qtype).dequantize_blocks(blocks).reshape(shape)


def dequantize_to(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, ...],
                  dtype: torch.dtype) -> torch.Tensor:
    """Like dequantize, cast to `dtype`, in chunks of blocks so large tensors need no full float32 copy."""
    blocks = _blocks(raw, qtype, tuple(shape))
    fmt = get_format(qtype)
    out = torch.empty((blocks.shape[0], fmt.block_size), dtype=dtype, device=raw.device)
    step = max(1, CHUNK_ELEMENTS // fmt.block_size)
    for start in range(0, blocks.shape[0], step):  # a few chunks per tensor, not a loop over blocks
        out[start : start + step] = fmt.dequantize_blocks(blocks[start : start + step])
    return out.reshape(shape)
