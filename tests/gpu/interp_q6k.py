"""Run under TRITON_INTERPRET=1 (by test_q6k_mmq.py): q6k_mmq.q6k_linear on tiny shapes on the CPU against
the float64 product with gguf-py's Q6_K dequantize (fp16 x: the interpreter's bf16 tl.dot is not usable).
Prints `name rel_err tolerance` per check: M = 3, 17, 64; K = 1536 (3 block pairs: the second block of
each pair is the 2-byte shifted one) split unevenly (2 + 1) and unsplit; N not a multiple of BN; the
magic-number and the converting dequantize; a bias at M = 3.
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from gpu_blocks import random_blocks, rel_err  # noqa: E402

from orcd.quant.kernels.q6k_mmq import q6k_linear  # noqa: E402

N, K = 40, 1536


def gguf_reference(x: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """float64 x @ W.T, W from gguf-py's numpy dequantize (the file format's reference)."""
    w = dequantize(raw.numpy(), T.Q6_K).astype(np.float64).reshape(raw.shape[0], -1)
    return x.double() @ torch.from_numpy(w).T


# (M, split-K target, magic): target 4 = 2 splits of 2 + 1 pairs, 1 = no split
CASES = [(3, 4, True), (17, 1, False), (64, 4, True)]


def checks():
    for m, target, magic in CASES:
        raw = random_blocks(T.Q6_K, N, K, seed=m)
        torch.manual_seed(m)
        x = (torch.randn(m, K) * torch.rand(m, 1) * 4).to(torch.float16)
        bias = torch.randn(N).to(torch.float16) if m == 3 else None
        ref = gguf_reference(x, raw) + (bias.double() if bias is not None else 0)
        y = q6k_linear(x, raw, N, K, bias=bias, launch=(16, 4, 1), target=target, magic=magic)
        yield f"q6k_m{m}_t{target}_magic{int(magic)}", rel_err(y, ref), 2e-3


if __name__ == "__main__":
    for name, err, tol in checks():
        print(name, f"{err:.3e}", tol, flush=True)
