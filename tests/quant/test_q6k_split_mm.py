"""The Q6_K split layout (issue 16) through the tensor-core batched kernels (batched_linear, batched_qkv,
batched_fused), the float GEMV (launch_gemv, fused_glu), the batch-invariant GEMM,
kernels/q6k_split.split_linear at 1, 4, 8, 64 and 65 rows and a split QuantLinear's forward: each equal
to the same path on GGUF's blocks bit for bit (interp_q6k_split_mm.py under the Triton interpreter);
FusedDecoder's 6-row step over a tiny qwen2 with split v, down and head: the GGUF model's logits
(interp_q6k_split_step.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from gguf import GGMLQuantizationType as T

from tests.gpu.interp_run import interpreter_only, run_under_interpreter


def test_mmq_takes_no_q6k():
    """split_linear mirrors fused_linear's routing without mmq.py's branch: MMQ must not take Q6_K (else
    a GGUF Q6_K weight's 5..64-row product would run MMQ and the split one batched_linear)."""
    from orcd.quant.kernels.mmq import mmq_routed

    assert not any(mmq_routed(T.Q6_K, 3584, dt) for dt in (torch.bfloat16, torch.float16, torch.float32))


@interpreter_only
def test_batched_kernels_split_equal_gguf():
    rows = run_under_interpreter(Path(__file__).with_name("interp_q6k_split_mm.py"), 600)
    names = [r[0] for r in rows]
    assert names[:7] == ["batched_linear_m8_float16", "batched_linear_m5_float32", "batched_fused_norm_res",
                         "batched_fused_glu", "gemv_splitk_norm_res", "fused_glu_m2", "batched_qkv_ggs"]
    assert names[7:9] == ["invariant_float16", "invariant_float32"]
    assert names[9:] == [f"{k}_m{m}" for m in (1, 4, 8, 64, 65) for k in ("split_linear", "quant_linear")]
    for name, err, _ in rows:
        assert float(err) == 0.0, name


@interpreter_only
def test_decode_step_split_equals_gguf():
    rows = run_under_interpreter(Path(__file__).with_name("interp_q6k_split_step.py"), 600)
    assert rows == [["decoder_rows6", "0", "0"]]
