"""Run under TRITON_INTERPRET=1 (by test_batched_linear.py): batched_linear on tiny shapes on the CPU.

Prints one line per check: `name rel_err tolerance` (fp32 and fp16 x; the interpreter's bf16 tl.dot is
not usable). Odd shapes: M = 1, 3, 17, 64; K not a multiple of the K step (Q8_0/Q5_0: 160 = 1.25 steps).
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks, reference, rel_err  # noqa: E402

from orcd.quant.kernels.batched_linear import batched_linear  # noqa: E402

# (type, out, in): K = in; 256-blocks for the K-quants (2 steps: split-K runs), 160 = 5 blocks of 32
SHAPES = [(T.Q4_K, 40, 512), (T.Q6_K, 24, 512), (T.Q8_0, 33, 160), (T.Q5_0, 20, 160)]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def checks():
    seed = 0
    for qt, n, k in SHAPES:
        for m in (1, 3, 17, 64):
            for dt in (torch.float32, torch.float16):
                seed += 1
                torch.manual_seed(seed)
                raw = random_blocks(qt, n, k, seed)
                x = torch.randn(m, k).to(dt)
                bias = torch.randn(n).to(dt) if m == 3 else None
                # target 1: no split; target 64: K split into single steps (an fp32 partial each);
                # swap False: x as the dot's first operand
                for target, swap in ((1, True), (64, True), (64, False)):
                    y = batched_linear(x, raw, n, k, qt, bias=bias, launch=(16, 4, 1), target=target,
                                       swap=swap)
                    ref = reference(x.float(), raw, qt, n, k)
                    if bias is not None:
                        ref = ref + bias.double()
                    yield f"{qt.name}_m{m}_{str(dt)[6:]}_t{target}_s{int(swap)}", rel_err(y, ref), TOL[dt]


if __name__ == "__main__":
    for name, err, tol in checks():
        print(name, f"{err:.3e}", tol, flush=True)
