"""RMSNorm, computed in float32 and cast back (as HF transformers and llama.cpp do)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [H], model dtype
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, ..., H] -> same shape and dtype."""
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)
