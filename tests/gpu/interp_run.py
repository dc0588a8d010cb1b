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


def check_results(results: list[list[str]], cases: int) -> None:
    """`cases` lines `name err tol` (split), each err < tol."""
    assert len(results) == cases, [r[0] for r in results]
    bad = [r for r in results if not float(r[1]) < float(r[2])]
    assert not bad, bad


def check_printed(out: str, cases: int) -> None:
    """check_results on printed text (a case module's output on CUDA, from capsys)."""
    check_results([ln.split() for ln in out.splitlines() if ln.strip()], cases)


def check_under_interpreter(script: str, cases: int, timeout: float = 300) -> None:
    """Run `script` under the interpreter: it must print `cases` lines `name err tol`, each err < tol."""
    check_results(run_under_interpreter(script, timeout=timeout), cases)
