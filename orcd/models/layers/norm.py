"""RMSNorm and LayerNorm, computed in float32 and cast back (as HF transformers and llama.cpp do)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    batch_invariant = False  # on CUDA, one program per row (orcd.numerics.batch_invariant_mode)

    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [H], model dtype
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, ..., H] -> same shape and dtype."""
        if self.batch_invariant and x.is_cuda:  # one program per row, fixed order (orcd.numerics)
            from orcd.quant.kernels.decode_ops import add_rmsnorm

            h = x.shape[-1]
            return add_rmsnorm(None, x.reshape(-1, h).contiguous(), self.weight, self.eps).view(x.shape)
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + self.eps)  # x*x: what pow(x, 2) computes
        return self.weight * xf.to(dtype)


class LayerNorm(nn.Module):
    """LayerNorm with weight and bias (GPT-2), computed in float32 and cast back; per row, so batch-invariant
    as it is."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [H]
        self.bias = nn.Parameter(bias, requires_grad=False)  # [H]
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> same shape and dtype."""
        h = x.shape[-1]
        return F.layer_norm(x.float(), (h,), self.weight.float(), self.bias.float(), self.eps).to(x.dtype)
