"""SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, gate: nn.Module, up: nn.Module, down: nn.Module):
        super().__init__()
        self.gate, self.up, self.down = gate, up, down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]."""
        return self.down(F.silu(self.gate(x)) * self.up(x))
