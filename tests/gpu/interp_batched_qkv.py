"""Run under TRITON_INTERPRET=1 (by test_batched_qkv.py): batched_qkv on tiny shapes on the CPU.

Prints one line per check: `name rel_err tolerance`, each of the three outputs against gguf's dequantize
and a float64 matmul (fp32 and fp16 x; the interpreter's bf16 tl.dot is not usable). Mixed types as in
Q4_K_M (q, k Q4_K; v Q6_K) and Q8_0; out not a multiple of BN; K = 2 steps of 256, so split-K runs.
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks, reference, rel_err  # noqa: E402

from orcd.quant.kernels.batched_qkv import batched_qkv  # noqa: E402

K = 512
SETS = {"q4q4q6": [(T.Q4_K, 40), (T.Q4_K, 24), (T.Q6_K, 24)], "q8q4q8": [(T.Q8_0, 33), (T.Q4_K, 16),
                                                                         (T.Q8_0, 17)]}
TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def checks():
    seed = 0
    for set_name, spec in SETS.items():
        for m in (1, 5, 17):
            for dt in (torch.float32, torch.float16):
                seed += 1
                torch.manual_seed(seed)
                raws = [random_blocks(qt, n, K, seed + 100 * j) for j, (qt, n) in enumerate(spec)]
                biases = [torch.randn(n).to(dt) for _qt, n in spec] if m == 5 else [None] * 3
                x = torch.randn(m, K).to(dt)
                weights = [(r, n, qt, b) for r, (qt, n), b in zip(raws, spec, biases, strict=True)]
                # target 1: no split; 64: K split into its two 256-input steps, summed in the kernel
                # (r1) or by the reduce launches (r0)
                for target, in_k in ((1, True), (64, True), (64, False)):
                    ys = batched_qkv(x, weights, K, launch=(16, 4, 1), target=target, reduce_in_kernel=in_k)
                    for j, ((qt, n), y, b) in enumerate(zip(spec, ys, biases, strict=True)):
                        ref = reference(x.float(), raws[j], qt, n, K)
                        if b is not None:
                            ref = ref + b.double()
                        assert y.shape == (m, n) and y.is_contiguous()
                        name = f"{set_name}_{'qkv'[j]}_m{m}_{str(dt)[6:]}_t{target}_r{int(in_k)}"
                        yield name, rel_err(y, ref), TOL[dt]


if __name__ == "__main__":
    for name, err, tol in checks():
        print(name, f"{err:.3e}", tol, flush=True)
