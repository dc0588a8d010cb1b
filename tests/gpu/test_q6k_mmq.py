"""q6k_mmq.q6k_linear (Q6_K batched decode product over raw 210-byte blocks with 4-byte loads): against
the torch dequantize reference on CUDA at the 7B shapes and odd shapes, and on the CPU under the Triton
interpreter against gguf-py's dequantize (small shapes)."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from interp_run import check_under_interpreter, interpreter_only
from mmq_cases import float_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# (out, in): 7B ffn_down, a 16,384-row slice of the LM head, attn_v; odd: out not a multiple of BN and
# 3 block pairs (uneven split-K)
SHAPES = [(3584, 18944), (16384, 3584), (512, 3584), (77, 1536)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", [1, 5, 17, 64])
@pytest.mark.parametrize("magic", [True, False])
def test_q6k_matches_reference(n, k, m, magic):
    """bf16 x: < 1e-2 from x @ W.T in float64 (bf16 weights); fp16 x with a bias; split-K repeatable."""
    from orcd.quant.kernels.q6k_mmq import q6k_linear

    raw = random_blocks(T.Q6_K, n, k, seed=m * 31 + n).cuda()
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    y = q6k_linear(x, raw, n, k, magic=magic)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    assert rel_err(y, float_reference(x, raw, T.Q6_K, n, k)) < 1e-2
    assert torch.equal(y, q6k_linear(x, raw, n, k, magic=magic))
    bias = torch.randn(n, device="cuda", generator=g).to(torch.float16)
    xh = x.to(torch.float16)
    y = q6k_linear(xh, raw, n, k, bias=bias, magic=magic)
    assert rel_err(y, float_reference(xh, raw, T.Q6_K, n, k) + bias.double()) < 1e-2


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [5, 64])
def test_fused_linear_routes_q6k(m):
    """fused_linear at 5..64 rows of bf16 x: the 7B Q6_K ffn_down through q6k_linear, bit for bit; fp32 x
    and the small 0.5B-sized Q6_K matrices never through it."""
    from orcd.quant.kernels.fused_linear import fused_linear
    from orcd.quant.kernels.q6k_mmq import q6k_linear, q6k_routed

    n, k = 3584, 18944
    raw = random_blocks(T.Q6_K, n, k, seed=m).cuda()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(fused_linear(x, raw, n, k, int(T.Q6_K)), q6k_linear(x, raw, n, k))
    assert not q6k_routed(T.Q6_K, n, k, torch.float32)
    assert not q6k_routed(T.Q6_K, 896, 4864, torch.bfloat16)


@interpreter_only
def test_q6k_under_interpreter():
    check_under_interpreter("interp_q6k.py", cases=3)


def test_q6k_routing_rules():
    """CPU: which products the route takes (no kernel runs)."""
    from orcd.quant.kernels.q6k_mmq import q6k_ok, q6k_routed

    assert q6k_routed(T.Q6_K, 152064, 3584, torch.bfloat16) and q6k_routed(T.Q6_K, 3584, 18944, torch.float16)
    assert not q6k_ok(T.Q6_K, 9472, torch.bfloat16)  # a TP shard of ffn_down: 37 blocks, no whole pairs
    assert not q6k_ok(T.Q4_K, 3584, torch.bfloat16) and not q6k_ok(T.Q6_K, 3584, torch.float32)
