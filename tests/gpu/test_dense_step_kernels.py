"""The dense decode step's small kernels (silu_mul, the attention over q columns of one q|k|v product):
under the Triton interpreter on the CPU, compiled on CUDA. Cases: dense_step_cases.py."""

from __future__ import annotations

import pytest
import torch
from dense_step_cases import CASES, cases
from interp_run import check_printed, check_under_interpreter, interpreter_only


@interpreter_only
def test_dense_step_kernels_under_interpreter():
    check_under_interpreter("dense_step_cases.py", cases=CASES)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dense_step_kernels_on_cuda(capsys):
    cases("cuda")
    check_printed(capsys.readouterr().out, CASES)
