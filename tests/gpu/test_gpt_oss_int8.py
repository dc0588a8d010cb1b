"""GptOssDecoder(int8_moe=True, int8_attn=True) against model.forward on the CPU under TRITON_INTERPRET=1
(gpt_oss_int8_cases.py). On CUDA: tests/gpu/test_moe_int8.py's and test_q8_int8.py's kernel cases, and
bench/kernels/gpt_oss_fused.py --int8 end to end."""

from __future__ import annotations

from interp_run import check_under_interpreter, interpreter_only


@interpreter_only
def test_int8_moe_step_under_interpreter():
    check_under_interpreter("gpt_oss_int8_cases.py", cases=2, timeout=600)
