"""Adapters from GGUF tensors to orcd.quant's QuantLinear / QuantEmbedding, and small dense tensors."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES
from torch import nn

from orcd.gguf.reader import GGUFTensor
from orcd.quant import QuantEmbedding, QuantLinear, dequantize_to
from orcd.quant.linear import raw_to_device


def linear(weight: GGUFTensor, bias: GGUFTensor | None, device: torch.device, dtype: torch.dtype,
           keep_quantized: bool) -> nn.Module:
    return QuantLinear.from_gguf(weight, bias, device, dtype, keep_quantized)


def embedding(weight: GGUFTensor, device: torch.device, dtype: torch.dtype,
              keep_quantized: bool) -> nn.Module:
    return QuantEmbedding.from_gguf(weight, device, dtype, keep_quantized)


def dense(t: GGUFTensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A small tensor (norm weight) dequantized to `dtype` on `device`."""
    return dequantize_to(raw_to_device(t, device), t.qtype, t.shape, dtype)


def split_rows(t: GGUFTensor, names: list[str], rows: list[int]) -> dict[str, GGUFTensor]:
    """Consecutive row ranges of a fused weight [out, in] (or its bias [out]) as tensors of their own.
    GGUF quantizes each row on its own, so slicing the raw blocks is exact for every type."""
    if len(t.shape) == 1:  # a bias: one row of raw bytes, `per` bytes an element (float types)
        block, size = GGML_QUANT_SIZES[t.qtype]
        per = size // block
        data, cut = t.data.reshape(1, -1), lambda d, r0, n: d[:, r0 * per : (r0 + n) * per]
    else:
        data, cut = t.data.reshape(t.shape[0], -1), lambda d, r0, n: d[r0 : r0 + n]  # [out, row_bytes]
    out, r0 = {}, 0
    for name, n in zip(names, rows, strict=True):
        out[name] = dataclasses.replace(t, name=name, shape=(n, *t.shape[1:]), device_copy=None,
                                        data=np.ascontiguousarray(cut(data, r0, n)))
        r0 += n
    return out
