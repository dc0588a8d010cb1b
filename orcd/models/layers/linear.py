"""Adapters from GGUF tensors to linear/embedding modules (orcd.quant's QuantLinear/QuantEmbedding)."""

from __future__ import annotations

import torch
from torch import nn

from orcd.gguf.reader import GGUFTensor

try:
    from orcd.quant import QuantEmbedding, QuantLinear
except ImportError:  # INTERIM until orcd.quant ships them: dense modules with the same contract
    QuantLinear = QuantEmbedding = None


def linear(weight: GGUFTensor, bias: GGUFTensor | None, device: torch.device, dtype: torch.dtype,
           keep_quantized: bool) -> nn.Module:
    if QuantLinear is None:
        return _DenseLinear(dense(weight, device, dtype), dense(bias, device, dtype) if bias else None)
    return QuantLinear.from_gguf(weight, bias, device, dtype, keep_quantized)


def embedding(weight: GGUFTensor, device: torch.device, dtype: torch.dtype,
              keep_quantized: bool) -> nn.Module:
    if QuantEmbedding is None:
        return _DenseEmbedding(dense(weight, device, dtype))
    return QuantEmbedding.from_gguf(weight, device, dtype, keep_quantized)


class _DenseLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


class _DenseEmbedding(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]

    def as_linear(self) -> nn.Module:
        lin = _DenseLinear.__new__(_DenseLinear)
        nn.Module.__init__(lin)
        lin.weight, lin.bias = self.weight, None
        return lin


def dense(t: GGUFTensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A small tensor (norm weight, bias) dequantized to `dtype` on `device`."""
    from orcd.quant import dequantize

    raw = torch.from_numpy(t.data.copy())
    return dequantize(raw, t.qtype, t.shape).to(device=device, dtype=dtype)
