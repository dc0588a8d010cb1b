"""The Triton kernels on the CPU through TRITON_INTERPRET=1 (a subprocess, so the rest of the test
process keeps compiled kernels). Skipped where triton is not importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as T

from orcd.quant.kernels import get_fused_linear, triton_available

HERE = Path(__file__).parent


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the compiled kernels are tested instead")
def test_kernels_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(HERE / "interp_check.py")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    results = [ln.split() for ln in lines if ln.strip()]
    assert len(results) == 32
    for name, err, tol in results:
        assert float(err) < float(tol), name


def test_no_kernel_for_cpu_or_unsupported_types():
    if os.environ.get("TRITON_INTERPRET") != "1":
        assert get_fused_linear(T.Q4_K, "cpu") is None
    assert get_fused_linear(T.IQ2_XXS, "cuda") is None
    assert get_fused_linear(T.F32, torch.device("cuda")) is None
