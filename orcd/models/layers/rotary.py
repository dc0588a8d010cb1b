"""Rotary position embedding, NeoX style (rotate halves), with optional linear scaling.

llama files store Q/K rows permuted for the interleaved (GPT-J) layout; the llama model un-permutes
those rows at load time, so every architecture here uses the NeoX rotation below.
"""

from __future__ import annotations

import torch

from orcd.errors import GGUFError

SUPPORTED_SCALING = ("none", "linear")


class RotaryEmbedding:
    """cos/sin for integer positions; not an nn.Module (holds no weights)."""

    def __init__(self, rope_dim: int, theta: float, scaling_type: str = "none", scaling_factor: float = 1.0,
                 device: torch.device | str = "cpu", freq_factors: torch.Tensor | None = None):
        if scaling_type not in SUPPORTED_SCALING:
            raise GGUFError(f"rope scaling type {scaling_type!r} is not supported (have: none, linear)")
        if rope_dim <= 0 or rope_dim % 2:
            raise GGUFError(f"rope dimension count {rope_dim} must be positive and even")
        self.rope_dim = rope_dim
        # computed on the CPU (as HF transformers does) and copied: no pow kernel to load on the device
        exps = torch.arange(0, rope_dim, 2, dtype=torch.int64).float() / rope_dim
        inv_freq = 1.0 / (theta**exps)  # [rope_dim / 2], float32
        if scaling_type == "linear" and scaling_factor not in (0.0, 1.0):
            inv_freq = inv_freq / scaling_factor  # position p is rotated as if it were p / factor
        if freq_factors is not None:  # llama 3.1+ files: per-frequency divisors (tensor rope_freqs.weight)
            inv_freq = inv_freq / freq_factors.to(device="cpu", dtype=torch.float32)
        self.inv_freq = inv_freq.to(device)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] int64 -> cos, sin [T, 1, rope_dim] in `dtype` (broadcast over heads)."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, rope_dim/2] fp32
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim]; rotates the first rope_dim dims (NeoX halves), leaves the rest."""
    rd = cos.shape[-1]
    xr, rest = (x, None) if rd == x.shape[-1] else (x[..., :rd], x[..., rd:])
    x1, x2 = xr[..., : rd // 2], xr[..., rd // 2 :]
    out = xr * cos + torch.cat((-x2, x1), dim=-1) * sin
    return out if rest is None else torch.cat((out, rest), dim=-1)
