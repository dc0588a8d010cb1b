"""The int8-activation Q8_0 GEMVs (q8_int8_gemv.py: q, k, v in one launch with the RMSNorm in x's
quantization; o into the residual) against float64 references (q8_int8_cases.py): under TRITON_INTERPRET=1
on the CPU (1 and 3 tokens, a masked K tail), compiled on CUDA at gpt-oss-20b's attention shapes."""

from __future__ import annotations

import pytest
import torch
from interp_run import check_printed, check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@interpreter_only
def test_q8_int8_under_interpreter():
    check_under_interpreter("q8_int8_cases.py", cases=6, timeout=300)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("tokens", [1, 8])
@pytest.mark.parametrize("launch", [None, (16, 2, 4)])
def test_q8_int8_gpt_oss_shapes(capsys, tokens, launch):
    from q8_int8_cases import run_case

    run_case("cuda", tokens, outs=(4096, 512, 512), k=2880, launch=launch)
    check_printed(capsys.readouterr().out, 3)
