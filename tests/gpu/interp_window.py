"""Run under TRITON_INTERPRET=1 (by test_window_attention.py): the sliding-window Triton kernels on the
CPU vs the torch reference. Prints one line per case: `name rel_err tolerance same`."""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from window_cases import decode_checks, invariant_checks  # noqa: E402

if __name__ == "__main__":
    for checks in (decode_checks("cpu", (torch.float32,)), invariant_checks("cpu", (torch.float32,))):
        for name, err, tol, same in checks:
            print(f"{name} {err:.3e} {tol} {int(same)}")
