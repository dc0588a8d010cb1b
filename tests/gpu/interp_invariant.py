"""Run under TRITON_INTERPRET=1 (by test_invariant_kernels.py): the batch-invariant kernels on the CPU.

Prints one line per check: `name rel_err tolerance same_bits` (fp32 and fp16: the interpreter's bf16
tl.dot is not usable).
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from invariant_cases import attention_checks, linear_checks  # noqa: E402

if __name__ == "__main__":
    for checks in (linear_checks("cpu", (torch.float32, torch.float16)),
                   attention_checks("cpu", (torch.float32,))):
        for name, err, tol, same in checks:
            print(name, f"{err:.3e}", tol, int(same), flush=True)
