"""Adapters from GGUF tensors to orcd.quant's QuantLinear / QuantEmbedding, and small dense tensors."""

from __future__ import annotations

import torch
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
