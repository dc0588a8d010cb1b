"""Dequantizers registered per GGML type. Each maps uint8 blocks [n, type_size] -> float32 [n, block_size]
with torch ops only (CPU or CUDA, no Python loop over blocks), bit-exact to gguf.quants.dequantize."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from orcd.errors import UnsupportedQuantTypeError

BlockFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class QuantFormat:
    qtype: GGMLQuantizationType
    block_size: int  # elements per block
    type_size: int  # bytes per block
    dequantize_blocks: BlockFn

    def row_bytes(self, row_len: int) -> int:
        return row_len // self.block_size * self.type_size


_FORMATS: dict[GGMLQuantizationType, QuantFormat] = {}


def register(qtype: GGMLQuantizationType) -> Callable[[BlockFn], BlockFn]:
    def deco(fn: BlockFn) -> BlockFn:
        block, size = GGML_QUANT_SIZES[qtype]
        _FORMATS[qtype] = QuantFormat(qtype, block, size, fn)
        return fn

    return deco


def qtype_name(qtype: object) -> str:
    try:
        return GGMLQuantizationType(int(qtype)).name  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return f"#{qtype}"


def get_format(qtype: GGMLQuantizationType | int) -> QuantFormat:
    """The registered format, or UnsupportedQuantTypeError naming the type."""
    try:
        fmt = _FORMATS.get(GGMLQuantizationType(int(qtype)))
    except (ValueError, TypeError):
        fmt = None
    if fmt is None:
        raise UnsupportedQuantTypeError(f"quant type {qtype_name(qtype)} is not supported "
                                        f"(supported: {', '.join(sorted(t.name for t in _FORMATS))})")
    return fmt


def supported_qtypes() -> frozenset[GGMLQuantizationType]:
    return frozenset(_FORMATS)


# --- small helpers shared by the per-family modules -------------------------------------------------------

def f16(blocks: torch.Tensor, offset: int) -> torch.Tensor:
    """The fp16 field at byte `offset` of every block, as float32 [n, 1]."""
    return blocks[:, offset : offset + 2].contiguous().view(torch.float16).float()


def shifts(values: list[int], shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A small constant uint8 tensor, made once per device (so dequantizing inside a CUDA graph capture
    does no host-to-device copy)."""
    return _const(tuple(values), shape, str(device))


@functools.lru_cache(maxsize=256)
def _const(values: tuple[int, ...], shape: tuple[int, ...], device: str) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8, device=device).reshape(shape)
