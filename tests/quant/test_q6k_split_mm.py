"""The Q6_K split layout (issue 16) through the tensor-core batched kernels (batched_linear, batched_qkv,
batched_fused), the float GEMV (launch_gemv, fused_glu), the batch-invariant GEMM,
kernels/q6k_split.split_linear at 1, 4, 8, 64 and 65 rows and a split QuantLinear's forward: each equal
to the same path on GGUF's blocks bit for bit (interp_q6k_split_mm.py under the Triton interpreter);
FusedDecoder's 6-row step over a tiny qwen2 with split v, down and head: the GGUF model's logits
(interp_q6k_split_step.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as T

from orcd.quant.kernels import triton_available


def test_mmq_takes_no_q6k():
    """split_linear mirrors fused_linear's routing without mmq.py's branch: MMQ must not take Q6_K (else
    a GGUF Q6_K weight's 5..64-row product would run MMQ and the split one batched_linear)."""
    from orcd.quant.kernels.mmq import mmq_routed

    assert not any(mmq_routed(T.Q6_K, 3584, dt) for dt in (torch.bfloat16, torch.float16, torch.float32))


@pytest.mark.skipif(not triton_available() or torch.cuda.is_available(),
                    reason="needs triton and no CUDA (the GPU command checks the compiled kernels)")
def test_batched_kernels_split_equal_gguf():
    env = dict(os.environ, TRITON_INTERPRET="1")
    script = Path(__file__).with_name("interp_q6k_split_mm.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    names = [r[0] for r in rows]
    assert names[:7] == ["batched_linear_m8_float16", "batched_linear_m5_float32", "batched_fused_norm_res",
                         "batched_fused_glu", "gemv_splitk_norm_res", "fused_glu_m2", "batched_qkv_ggs"]
    assert names[7:9] == ["invariant_float16", "invariant_float32"]
    assert names[9:] == [f"{k}_m{m}" for m in (1, 4, 8, 64, 65) for k in ("split_linear", "quant_linear")]
    for name, err, _ in rows:
        assert float(err) == 0.0, name


@pytest.mark.skipif(not triton_available() or torch.cuda.is_available(),
                    reason="needs triton and no CUDA (the GPU command checks the compiled kernels)")
def test_decode_step_split_equals_gguf():
    env = dict(os.environ, TRITON_INTERPRET="1")
    script = Path(__file__).with_name("interp_q6k_split_step.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    assert rows == [["decoder_rows6", "0", "0"]]
