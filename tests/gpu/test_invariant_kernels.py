"""The batch-invariant kernels (orcd.numerics): close to float64 references, and each row bit-identical
whatever batch it is computed in. Compiled on CUDA; on the CPU through TRITON_INTERPRET=1 (subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orcd.quant.kernels import triton_available

HERE = Path(__file__).parent


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the compiled kernels are tested instead")
def test_invariant_kernels_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(HERE / "interp_invariant.py")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(rows) == 11
    for name, err, tol, same in rows:
        assert float(err) < float(tol), name
        assert same == "1", f"{name}: a row changed with its batch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_invariant_kernels_on_cuda():
    sys.path.insert(0, str(HERE))
    from invariant_cases import attention_checks, linear_checks

    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    results = list(linear_checks("cuda", dtypes, m_full=300)) + list(attention_checks("cuda", dtypes))
    for name, err, _, same in results:
        print(name, f"{err:.2e}", same)
    for name, err, tol, same in results:
        assert err < tol, name
        assert same, f"{name}: a row changed with its batch"
