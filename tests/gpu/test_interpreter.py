"""The Triton kernels on the CPU through TRITON_INTERPRET=1 (a subprocess, so the rest of the test
process keeps compiled kernels). Skipped where triton is not importable."""

from __future__ import annotations

import os

import torch
from gguf import GGMLQuantizationType as T
from interp_run import check_under_interpreter, interpreter_only

from orcd.quant.kernels import get_fused_linear


@interpreter_only
def test_kernels_under_interpreter():
    check_under_interpreter("interp_check.py", cases=32, timeout=120)


def test_no_kernel_for_cpu_or_unsupported_types():
    if os.environ.get("TRITON_INTERPRET") != "1":
        assert get_fused_linear(T.Q4_K, "cpu") is None
    assert get_fused_linear(T.IQ2_XXS, "cuda") is None
    assert get_fused_linear(T.F32, torch.device("cuda")) is None
