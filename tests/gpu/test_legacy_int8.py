"""The int8-activation Q8_0 / Q5_0 GEMVs (gemv_legacy_int8.py; the 72B's ffn_down) against float64
references (legacy_int8_cases.py): under TRITON_INTERPRET=1 on the CPU (1 and 3 tokens, a masked K tail;
the unfused step's 6-row Q5_0 down), compiled on CUDA at the 72B's down inputs (29,568, whose 924 blocks
leave a tail) and a TP rank's half, and the unfused step's 5..9-row Q5_0 downs (DecodeProducts.down_rows)."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from interp_run import check_printed, check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@interpreter_only
def test_legacy_int8_under_interpreter():
    check_under_interpreter("legacy_int8_cases.py", cases=13, timeout=300)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("qt", [Q.Q8_0, Q.Q5_0])
@pytest.mark.parametrize("tokens", [1, 3, 8])
@pytest.mark.parametrize("k", [29568, 14784])
def test_legacy_int8_72b_down_inputs(capsys, qt, tokens, k):
    from legacy_int8_cases import run_case

    run_case("cuda", qt, tokens, out_f=520, k=k)
    check_printed(capsys.readouterr().out, 3)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("rows", [5, 8, 9])
def test_unfused_step_q5_0_down_rows(capsys, rows):
    from legacy_int8_cases import run_rows

    run_rows("cuda", rows, out_f=520, k=14784)
    check_printed(capsys.readouterr().out, (2 if rows > 8 else 1))
