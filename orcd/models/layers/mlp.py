"""Feed-forward blocks: SwiGLU down(silu(gate(x)) * up(x)), GeluGLU (Gemma), GeluMLP (GPT-2)."""

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


class GeluGLU(nn.Module):
    """GELU(tanh)-gated feed-forward (Gemma): down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, gate: nn.Module, up: nn.Module, down: nn.Module):
        super().__init__()
        self.gate, self.up, self.down = gate, up, down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]."""
        return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))


class GeluMLP(nn.Module):
    """Ungated feed-forward (GPT-2): down(gelu_tanh(up(x))), biases inside the linears."""

    def __init__(self, up: nn.Module, down: nn.Module):
        super().__init__()
        self.up, self.down = up, down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]."""
        return self.down(F.gelu(self.up(x), approximate="tanh"))
