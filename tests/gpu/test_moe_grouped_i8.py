"""The expert-grouped int8 MoE GEMV (moe_grouped_i8.py) and norm_route(quant=True) against float64
references, the per-pair int8 kernel and quantize_x (moe_grouped_i8_cases.py): under TRITON_INTERPRET=1 on
the CPU (shared experts, groups longer than TM, routing invariance), compiled on CUDA the same cases plus
gpt-oss-20b's expert shapes at 8 tokens."""

from __future__ import annotations

import pytest
import torch
from interp_run import check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")


@interpreter_only
def test_moe_grouped_i8_under_interpreter():
    check_under_interpreter("moe_grouped_i8_cases.py", cases=15, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_moe_grouped_i8_cuda(capsys):
    from moe_grouped_i8_cases import run_all

    run_all("cuda", torch.Generator().manual_seed(0), cuda_shapes=True)
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert len(lines) == 19
    bad = [ln for ln in lines if not float(ln[1]) < float(ln[2])]
    assert not bad, bad
