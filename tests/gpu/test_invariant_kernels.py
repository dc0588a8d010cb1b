"""The batch-invariant kernels (orcd.numerics): close to float64 references, and each row bit-identical
whatever batch it is computed in. Compiled on CUDA; on the CPU through TRITON_INTERPRET=1 (subprocess)."""

from __future__ import annotations

import pytest
import torch
from interp_run import interpreter_only, run_under_interpreter


@interpreter_only
def test_invariant_kernels_under_interpreter():
    rows = run_under_interpreter("interp_invariant.py", timeout=300)
    assert len(rows) == 11
    for name, err, tol, same in rows:
        assert float(err) < float(tol), name
        assert same == "1", f"{name}: a row changed with its batch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_invariant_kernels_on_cuda():
    from invariant_cases import attention_checks, linear_checks

    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    results = list(linear_checks("cuda", dtypes, m_full=300)) + list(attention_checks("cuda", dtypes))
    for name, err, _, same in results:
        print(name, f"{err:.2e}", same)
    for name, err, tol, same in results:
        assert err < tol, name
        assert same, f"{name}: a row changed with its batch"
