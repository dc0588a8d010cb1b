"""The int8-activation MXFP4 MoE GEMV (moe_mxfp4_int8.py) against float64 references and the float kernel
(moe_int8_cases.py): under TRITON_INTERPRET=1 on the CPU (1 and 3 tokens, a masked K tail), compiled on
CUDA at gpt-oss-20b's expert shapes (2880 x 2880, top 4) for 1..8 tokens and at the small odd shapes."""

from __future__ import annotations

import pytest
import torch
from interp_run import check_printed, check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@interpreter_only
def test_moe_int8_under_interpreter():
    check_under_interpreter("moe_int8_cases.py", cases=10, timeout=300)


def _check_cuda(capsys, **kw):
    from moe_int8_cases import run_case

    run_case("cuda", gen=torch.Generator().manual_seed(0), **kw)
    check_printed(capsys.readouterr().out, 5)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("tokens", [1, 2, 8])
def test_moe_int8_gpt_oss_shapes(capsys, tokens):
    _check_cuda(capsys, tokens=tokens, dims=(6, 4, 2880, 2880))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("launch", [None, (32, 2, 4), (4, 8, 2)])
def test_moe_int8_odd_shapes(capsys, launch):
    _check_cuda(capsys, tokens=3, launch=launch, dims=(4, 2, 64, 96))

