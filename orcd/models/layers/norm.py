"""RMSNorm, computed in float32 and cast back (as HF transformers and llama.cpp do)."""

from __future__ import annotations

import torch
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
