"""Sliding-window attention (gemma3's local layers) in the Triton paths vs the torch reference with the
same window: compiled on CUDA (and rows bit-identical across batches in the invariant kernel); on the CPU
through TRITON_INTERPRET=1 (subprocess)."""

from __future__ import annotations

import pytest
import torch
from interp_run import interpreter_only, run_under_interpreter


@interpreter_only
def test_window_kernels_under_interpreter():
    rows = run_under_interpreter("interp_window.py", timeout=300)
    assert len(rows) == 7
    for name, err, tol, _same in rows:  # the interpreter's tl.dot rounds by tile position: no bit checks
        assert float(err) < float(tol), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_window_kernels_on_cuda():
    from window_cases import backend_checks, decode_checks, invariant_checks

    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    results = [*decode_checks("cuda", dtypes), *invariant_checks("cuda", dtypes),
               *backend_checks("cuda", dtypes)]
    for name, err, _, same in results:
        print(name, f"{err:.2e}", same)
    for name, err, tol, same in results:
        assert err < tol, name
        assert same, f"{name}: a row changed with its batch"
