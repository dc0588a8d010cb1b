"""The gpt-oss fused decode step with int8 x (GptOssDecoder(model, int8_moe=True, int8_attn=True): the
experts through moe_mxfp4_int8, the Q8_0 q, k, v and o through q8_int8_gemv) against model.forward on
the tiny fp32 file of tests/models/gpt_oss_fused_cases.py, the kernels under TRITON_INTERPRET=1 (run by
test_gpt_oss_int8.py). Prints `name rel-err tol`: the logits differ from the float path only by the
int8 rounding of the GEMV inputs (|x - dx q| <= dx / 2 per 32 values): 8.1e-3 measured, tolerance 3e-2
(a wrong expert, weight, row or slot sum gives O(1)); the float fused step against model.forward is
tests/models/test_gpt_oss_fused.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from gpt_oss_fused_cases import decode_step, setup, step_inputs  # noqa: E402
from models_helpers import rel_err  # noqa: E402

from orcd.runner.fused_gpt_oss import GptOssDecoder  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    model, kv, seqs = setup("cpu", torch.float32)
    step = GptOssDecoder(model)
    assert not step.int8_moe and not step.int8_attn  # off by default for float32 models
    inputs = step_inputs(seqs[:2])
    ref = decode_step(None, model, kv, inputs)
    got = decode_step(GptOssDecoder(model, int8_moe=True, int8_attn=True), model, kv, inputs)
    print(f"int8-step-b2 {rel_err(got, ref):.3e} 3e-2")


if __name__ == "__main__":
    main()
