"""Run under TRITON_INTERPRET=1 (by test_mmq.py): mmq_linear on tiny shapes on the CPU against the exact
reference of its int8 arithmetic (mmq_cases.exact_reference). Prints `name rel_err tolerance` per check.
M = 3, 17, 64; K = 768 (3 super-blocks) split unevenly (2 + 1), and unsplit at M = 17; N not a multiple
of BN; the 16-bit paths (int8 x and bf16-w) against the float reference at M = 3 and 64.
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks, rel_err  # noqa: E402
from mmq_cases import check_quantized_x, exact_reference, float_reference  # noqa: E402

from orcd.quant.kernels.mmq import mmq_linear  # noqa: E402

SHAPES = [(T.Q4_K, 40, 768), (T.Q6_K, 24, 768)]


def checks():
    seed = 0
    for qt, n, k in SHAPES:
        for m in (3, 17, 64):
            seed += 1
            torch.manual_seed(seed)
            raw = random_blocks(qt, n, k, seed)
            x = (torch.randn(m, k) * torch.rand(m, 1) * 4).to(torch.float16)
            bias = torch.randn(n).to(torch.float16) if m == 3 else None
            yield f"xq_{qt.name}_m{m}", check_quantized_x(x), 1e-3
            exact = exact_reference(x, raw, qt, n, k) + (bias.double() if bias is not None else 0)
            for target in (1, 4) if m == 17 else (4,):  # 1: no split; 4: 2 splits of 2 + 1 super-blocks
                y = mmq_linear(x.float(), raw, n, k, qt, bias=bias.float() if bias is not None else None,
                               launch=(16, 4, 1), target=target)
                yield f"{qt.name}_m{m}_t{target}_exact", rel_err(y, exact), 1e-5
            if m == 17:
                continue
            y = mmq_linear(x, raw, n, k, qt, bias=bias, launch=(32, 4, 1))
            ref = float_reference(x, raw, qt, n, k) + (bias.double() if bias is not None else 0)
            yield f"{qt.name}_m{m}_fp16_vs_float", rel_err(y, ref), 2e-2
            y = mmq_linear(x, raw, n, k, qt, bias=bias, launch=(32, 4, 1), float_w=True)
            yield f"{qt.name}_m{m}_float_w", rel_err(y, ref), 2e-3


if __name__ == "__main__":
    for name, err, tol in checks():
        print(name, f"{err:.3e}", tol, flush=True)
