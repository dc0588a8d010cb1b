"""GptOssDecoder(fuse_quant=True) (gpt_oss_fuse_quant_cases.py): each fused producer's int8 words and
scales equal quantize_x's of its output, and the fused int8 step equals the unfused one: under
TRITON_INTERPRET=1 on the CPU (bit for bit, logits included), compiled on CUDA at the small shapes and
at gpt-oss-20b's (words and scales bit for bit; the step within 1e-2)."""

from __future__ import annotations

import pytest
import torch
from interp_run import check_printed, check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")


@interpreter_only
def test_fuse_quant_under_interpreter():
    check_under_interpreter("gpt_oss_fuse_quant_cases.py", cases=7, timeout=600)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fuse_quant_cuda_small_and_step(capsys):
    from gpt_oss_fuse_quant_cases import main

    main()
    check_printed(capsys.readouterr().out, 7)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("rows", [1, 8])
def test_fuse_quant_cuda_gpt_oss_shapes(capsys, rows):
    from gpt_oss_fuse_quant_cases import gpt_oss_shapes

    gpt_oss_shapes("cuda", rows)
    check_printed(capsys.readouterr().out, 6)
