"""Run a check script under TRITON_INTERPRET=1 in a subprocess (the test process keeps compiled kernels)
and return its output lines split into fields, or check its `name err tol` lines. `interpreter_only`
marks tests that need it: triton installed, and no CUDA (where CUDA is present the compiled kernels are
tested instead)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orcd.quant.kernels import triton_available

HERE = Path(__file__).parent

interpreter_only = pytest.mark.skipif(
    not triton_available() or torch.cuda.is_available(),
    reason="needs triton and no CUDA (with CUDA the compiled kernels are tested instead)")


def run_under_interpreter(script: str | Path, timeout: float, *args: str) -> list[list[str]]:
    """script: a file name under tests/gpu, or a path; args: its command-line arguments."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(HERE / script), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]


def check_under_interpreter(script: str, cases: int, timeout: float = 300) -> None:
    """Run `script` under the interpreter: it must print `cases` lines `name err tol`, each err < tol."""
    results = run_under_interpreter(script, timeout=timeout)
    assert len(results) == cases, [r[0] for r in results]
    for name, err, tol in results:
        assert float(err) < float(tol), name
