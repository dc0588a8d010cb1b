"""The fused decode step under tensor parallelism (orcd.distributed.fused_tp) on the CPU: 2 gloo ranks
run the Triton kernels under TRITON_INTERPRET=1 (a subprocess) and must give the unsharded model's
logits; and which step the TP runner's decode graphs capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.gguf.synth import write_model_gguf
from orcd.quant.kernels import triton_available

HERE = Path(__file__).parent


@pytest.mark.slow  # ~20 s on 2 idle cores: the interpreter runs a GEMV program in ~10 ms
@pytest.mark.skipif(not triton_available() or torch.cuda.is_available(),
                    reason="needs triton and no CUDA (on GPUs test_tp_nccl_gpu.py runs the compiled kernels)")
def test_tp_fused_decode_matches_unsharded_model(tmp_path):
    # hidden 64 / 4 heads / ffn 96 (3 Q8_0 blocks: 64 + 32 columns); one layer, a small vocabulary
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=96, hidden=64, n_layers=1, ffn=96,
                            n_heads=4, n_kv_heads=2, context_length=256, qtypes={"default": Q.Q8_0},
                            tied=False, seed=3, tokenizer_metadata={})
    out = tmp_path / "errs.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(HERE / "interp_tp_fused.py"), str(path), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errs = dict(json.loads(out.read_text()))
    assert set(errs) == {"batch1", "batch5"}
    # float32 throughout: a missing or doubled all-reduce gives O(1)
    assert all(e < 1e-5 for e in errs.values()), errs


@pytest.mark.slow  # ~25 s on 2 idle cores: K-quant widths (256 per rank) make ~330 GEMV programs per rank
@pytest.mark.skipif(not triton_available() or torch.cuda.is_available(),
                    reason="needs triton and no CUDA (on GPUs test_tp_nccl_gpu.py runs the compiled kernels)")
@pytest.mark.parametrize("down", [Q.Q6_K, Q.Q5_0, Q.Q8_0])
def test_tp_fused_decode_int8_products(tmp_path, down):
    # the Q4_K_M mix (Q6_K attn_v, ffn_down, head; Q5_0 / Q8_0 downs: its fallbacks where the FFN width
    # is not a multiple of 256, the 72B's); hidden 256, 4 heads of 128: each rank's o and down keep 256
    # input columns, one Q4_K/Q6_K block
    types = {"default": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": down, "output": Q.Q6_K}
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=64, hidden=256, n_layers=1, ffn=512,
                            n_heads=4, n_kv_heads=2, head_dim=128, context_length=256, qtypes=types,
                            tied=False, seed=5, tokenizer_metadata={})
    out = tmp_path / "res.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(HERE / "interp_tp_int8.py"), str(path), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    # bf16: norm-fused, int8 x for every product, I8_MAX_ROWS rows; float32: float x unless asked
    assert res["int8"] == [True] * 5, res["int8"]
    # x rounded to int8 per 32 (float32 otherwise): 1.9 % measured; rank 1 dropping its o partial: O(1)
    assert res["err"] < 5e-2, res["err"]
