"""Run under TRITON_INTERPRET=1 (by test_fused_gemma3.py): the QK-norm fused decode step on the CPU vs
model.forward + compute_logits in float32, and its small kernels vs the eager layers. Prints one line
per case: `name rel_err tolerance`."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from gemma3_fused_cases import decode_checks, kernel_checks, write_case  # noqa: E402

CPU_CASES = ("gemma3-small", "qwen3-small")

if __name__ == "__main__":
    # float32 only: the interpreter rounds float32 -> bfloat16 toward zero, torch to nearest
    for name, err in kernel_checks("cpu", torch.float32):
        print(f"{name} {err:.3e} 1e-5")
    with tempfile.TemporaryDirectory() as tmp:
        for name in CPU_CASES:
            path = write_case(Path(tmp), name)
            for rows in (3, 6):
                for i, (err, same) in enumerate(decode_checks(path, "cpu", torch.float32, rows)):
                    print(f"{name}-rows{rows}-step{i} {err if same else 1.0:.3e} 1e-4")
        # six rows on the GEMV kernels, qwen3 (the residual adds inside the o and down GEMVs); six rows on
        # the norm-fused layer with batched_fused products (post norms / residual adds, GELU / SiLU GLU)
        for err, same in decode_checks(write_case(Path(tmp), "qwen3-small"), "cpu", torch.float32, 6,
                                       gemv_rows=8):
            print(f"qwen3-small-rows6-gemv {err if same else 1.0:.3e} 1e-4")
        for name in CPU_CASES:
            for err, same in decode_checks(Path(tmp) / f"{name}.gguf", "cpu", torch.float32, 6, fused_rows=8):
                print(f"{name}-rows6-batched-fused {err if same else 1.0:.3e} 1e-4")
