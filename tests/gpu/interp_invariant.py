"""Run under TRITON_INTERPRET=1 (by test_invariant_kernels.py): the batch-invariant kernels on the CPU.

Prints one line per check: `name rel_err tolerance same_bits` (fp32 and fp16: the interpreter's bf16
tl.dot is not usable).
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from invariant_cases import attention_checks, linear_checks  # noqa: E402
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle  # noqa: E402


def position_independent_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """The interpreter's tl.dot is numpy's matmul (BLAS), which rounds a row differently by its place in
    the [BM, BN] tile (and by buffer alignment); the GPU's tl.dot does not. Each element here is one
    float64 sum of exact products in k order, rounded once, wherever its row sits."""
    prod = a.data.astype(np.float64)[:, :, None] * b.data.astype(np.float64)[None, :, :]
    return TensorHandle(prod.sum(axis=1).astype(d.data.dtype) + d.data, d.dtype.scalar)


InterpreterBuilder.create_dot = position_independent_dot

if __name__ == "__main__":
    for checks in (linear_checks("cpu", (torch.float32, torch.float16)),
                   attention_checks("cpu", (torch.float32,))):
        for name, err, tol, same in checks:
            print(name, f"{err:.3e}", tol, int(same), flush=True)
