"""Run under TRITON_INTERPRET=1 (by test_batched_fused.py): batched_fused (RMSNorm of x, residual add,
SwiGLU, GELU-GLU) on tiny shapes on the CPU against a float64 torch reference of the same rounding steps.

Prints one line per check: `name rel_err tolerance` (fp32 and fp16 x; K whole and split). Odd shapes:
M = 5, 17; Q5_0 / Q8_0 K = 160 (K not a multiple of the 128-input step).
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from fused_cases import fused_reference  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks, rel_err  # noqa: E402

from orcd.quant.kernels.batched_fused import batched_fused  # noqa: E402

SHAPES = [(T.Q5_0, 20, 160), (T.Q8_0, 33, 160), (T.Q4_K, 24, 512), (T.Q6_K, 40, 256)]
TOL = {torch.float32: 1e-5, torch.float16: 3e-3}


def checks():
    seed = 0
    for qt, n, k in SHAPES:
        for m, dt, mode in ((5, torch.float32, "norm"), (17, torch.float16, "res"), (8, torch.float16, "glu"),
                            (5, torch.float32, "gelu")):
            seed += 1
            torch.manual_seed(seed)
            raw = random_blocks(qt, n, k, seed)
            up = random_blocks(qt, n, k, seed + 100) if mode in ("glu", "gelu") else None
            x = torch.randn(m, k).to(dt)
            wscale = 0.05 if mode == "glu" else 1.0  # fp16-safe gate * up products
            norm = ((torch.rand(k) * wscale + 0.5 * wscale).to(dt), 1e-6) if mode != "res" else None
            res = torch.randn(m, n).to(dt) if mode == "res" else None
            bias = torch.randn(n).to(dt) if mode == "norm" else None
            ref = fused_reference(x, raw, qt, n, k, norm, res, up, bias, gelu=mode == "gelu")
            # target 1: K whole; 64: K split into single steps (not the GLUs), partials reduced after
            for target in (1, 64) if up is None else (64,):
                r = res.clone() if res is not None else None
                y = batched_fused(x, raw, n, k, qt, norm=norm, residual=r, raw_up=up, bias=bias,
                                  launch=(16, 4, 1), gelu=mode == "gelu", target=target)
                assert r is None or y is r
                yield f"{qt.name}_m{m}_{str(dt)[6:]}_{mode}_t{target}", rel_err(y, ref), TOL[dt]


if __name__ == "__main__":
    for name, err, tol in checks():
        print(name, f"{err:.3e}", tol, flush=True)
