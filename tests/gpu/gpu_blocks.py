"""Random GGUF blocks with finite fp16 scales, and a float64 reference for x @ W.T."""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as T

from orcd.quant import dequantize

# qtype -> (block size, bytes per block, byte offsets of fp16 scales within a block)
LAYOUT = {
    T.Q8_0: (32, 34, (0,)),
    T.Q5_0: (32, 22, (0,)),
    T.Q4_K: (256, 144, (0, 2)),
    T.Q6_K: (256, 210, (208,)),
}


def random_blocks(qtype: T, out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """uint8 [out, row_bytes]: random quant bits, scales ~ N(0, 0.02) stored as fp16."""
    bs, ts, scale_offs = LAYOUT[qtype]
    rng = np.random.default_rng(seed)
    nb = in_features // bs
    raw = rng.integers(0, 256, size=(out_features, nb, ts), dtype=np.uint8)
    for off in scale_offs:
        d = (rng.standard_normal((out_features, nb)) * 0.02).astype(np.float16)
        raw[:, :, off:off + 2] = d.view(np.uint8).reshape(out_features, nb, 2)
    return torch.from_numpy(raw.reshape(out_features, nb * ts))


def reference(x: torch.Tensor, raw: torch.Tensor, qtype: T, out_features: int, in_features: int):
    w = dequantize(raw.cpu(), qtype, (out_features, in_features)).double()
    return x.cpu().double() @ w.T


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """|out - ref| / |ref| in float64 on ref's device (the 7B references stay on the GPU)."""
    out = out.to(ref.device).double()
    assert torch.isfinite(out).all()
    return float((out - ref).norm() / ref.norm())
