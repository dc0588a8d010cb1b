"""GptOssDecoder(int8_moe=True, int8_attn=True) against model.forward on the CPU under TRITON_INTERPRET=1
(gpt_oss_int8_cases.py). On CUDA: tests/gpu/test_moe_int8.py's and test_q8_int8.py's kernel cases, and
bench/kernels/gpt_oss_fused.py --int8 end to end, and here the int8 step in CUDA graphs against
model.forward in bf16."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from interp_run import check_under_interpreter, interpreter_only


@interpreter_only
def test_int8_moe_step_under_interpreter():
    check_under_interpreter("gpt_oss_int8_cases.py", cases=1, timeout=600)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fuse_quant", [False, True])
def test_int8_step_in_graphs_close_to_model_forward(fuse_quant):
    """bf16, CUDA graphs (buckets 1-8): GptOssDecoder(int8_moe, int8_attn, fuse_quant) against eager
    model.forward within 3e-2 and the same greedy token where the top two logits are apart."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from gpt_oss_fused_cases import BATCHES, BLOCK, BLOCKS, WIDTH, decode_step, setup, step_inputs
    from models_helpers import rel_err

    from orcd.runner.decode_graphs import DecodeGraphs
    from orcd.runner.fused_gpt_oss import GptOssDecoder

    model, kv, seqs = setup("cuda", torch.bfloat16)
    step = GptOssDecoder(model, int8_moe=True, int8_attn=True, fuse_quant=fuse_quant)
    graphs = DecodeGraphs(model, kv, BLOCK, WIDTH, BLOCKS - 1, (1, 2, 4, 8), step)
    graphs.capture()
    for b in BATCHES:
        inputs = [t.cuda() for t in step_inputs(seqs[:b])]
        ref = decode_step(None, model, kv, inputs)
        got = graphs.replay(*inputs)[0]
        assert rel_err(got, ref) < 3e-2, b
        top2 = ref.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 0.05
        assert torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear]), b
