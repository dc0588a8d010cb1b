"""References for mmq.py's int8 products: the x quantization in torch, and the exact float64 value of
what the kernel computes (int8 x per 32, Q4_K's mins times the sum of x itself), from the torch
dequantize path."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as T

from orcd.quant.dequant import dequantize
from orcd.quant.kernels.mmq_x import quantize_x32


def quantize_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(xq, dx, sum of x) per 32 inputs, as mmq_x.quantize_x32 defines them, in float32 torch."""
    b = x.float().reshape(x.shape[0], -1, 32)
    amax = b.abs().amax(-1)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    v = b * inv[..., None]
    q = torch.where(v >= 0, v + 0.5, v - 0.5).trunc()
    return q.reshape(x.shape).to(torch.int8), amax / 127.0, b.sum(-1)


def check_quantized_x(x: torch.Tensor) -> float:
    """quantize_x32 against quantize_ref: the largest relative difference of the scales and sums, or the
    fraction of xq that differ (by one, at a rounding tie: x * (127 / amax) rounds apart), or 1.0 where
    any xq differs by more than one."""
    got, ref = quantize_x32(x), quantize_ref(x.cpu())
    dq = (got[0].cpu().int() - ref[0].int()).abs()
    if int(dq.max()) > 1:
        return 1.0
    pairs = zip(got[1:], ref[1:], strict=True)
    rel = max(float(((g.cpu() - r).abs() / (r.abs() + 1e-6)).max()) for g, r in pairs)
    return max(rel, float((dq > 0).double().mean()))


def exact_reference(x: torch.Tensor, raw: torch.Tensor, qt: T, n: int, k: int) -> torch.Tensor:
    """float64 [M, N]: W @ (xq * dx), plus for Q4_K the mins times (sum of x - dx * sum of xq) per 32:
    W with every quant zeroed is -dmin * m_j on sub-block j."""
    xq, dx, sx = (t.double() for t in quantize_x32(x))  # on x's device
    m = x.shape[0]
    xdeq = (xq.reshape(m, -1, 32) * dx[..., None]).reshape(m, k)
    w = dequantize(raw, qt, (n, k)).double()
    y = xdeq @ w.T
    if qt == T.Q4_K:
        zq = raw.clone().view(n, -1, 144)
        zq[:, :, 16:] = 0
        wz = dequantize(zq.reshape(n, -1), qt, (n, k)).double()  # -dmin * m_j per input
        corr = (sx - dx * xq.reshape(m, -1, 32).sum(-1)) / 32
        y = y + corr.repeat_interleave(32, dim=1) @ wz.T
    return y


def float_reference(x: torch.Tensor, raw: torch.Tensor, qt: T, n: int, k: int) -> torch.Tensor:
    """float64 x @ W.T (W from the torch dequantize path)."""
    return x.double() @ dequantize(raw, qt, (n, k)).double().T
