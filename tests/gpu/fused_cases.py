"""The float64 reference of batched_fused.py's products: RMSNorm of x with the GEMVs' two roundings to x's
dtype, x' @ W.T (W from gguf's dequantize), then the residual add or the SwiGLU (or GELU-GLU)."""

from __future__ import annotations

import torch
from gpu_blocks import reference


def rmsnorm_like_gemv(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    """bf16/fp16 round(round(x * rstd) * w), rstd = 1 / sqrt(mean(x^2) + eps) in float32 (as _ldx)."""
    w, eps = norm
    xf = x.float()
    rstd = 1.0 / torch.sqrt((xf * xf).mean(dim=1, keepdim=True) + eps)
    return ((xf * rstd).to(x.dtype).float() * w.float()).to(x.dtype)


def fused_reference(x, raw, qt, n, k, norm=None, residual=None, raw_up=None, bias=None,
                    gelu: bool = False) -> torch.Tensor:
    """float64 [M, n] on x's device: x' @ W.T (+ bias), + residual, or silu(x' @ W.T) * (x' @ U.T)."""
    xn = rmsnorm_like_gemv(x, norm) if norm is not None else x
    y = reference(xn.float(), raw, qt, n, k).to(x.device)
    if bias is not None:
        y = y + bias.double()
    if raw_up is not None:
        act = torch.nn.functional.gelu(y, approximate="tanh") if gelu else torch.nn.functional.silu(y)
        y = act * reference(xn.float(), raw_up, qt, n, k).to(x.device)
    if residual is not None:
        y = y + residual.double()
    return y
