"""The split Q6_K layout (issue 16) on CUDA at qwen2.5-7B's Q6_K shapes, bf16: split_linear (the split
weight's product at every row count, fused_linear's routing: the float GEMV, batched_linear, dequantize
+ cuBLAS; 5..64 rows go to mmq_cuda, which reads the split layout only: tests/gpu/test_mmq_cuda.py)
and batched_qkv with v split, each equal to the GGUF blocks' result bit for bit (the CPU interpreter
checks the same at small shapes: tests/quant/test_q6k_split_mm.py); the batch-invariant GEMM."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
SHAPES = [(512, 3584), (3584, 18944), (16384, 3584)]  # v, down (routed), a slice of the LM head (routed)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("n,k", SHAPES)
def test_split_linear_equals_gguf(n, k):
    from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_linear
    from orcd.quant.kernels.layout import split_q6_k
    from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear, mmq_cuda_routed
    from orcd.quant.kernels.q6k_split import split_linear

    raw = random_blocks(T.Q6_K, n, k, seed=n + k).cuda()
    sp = split_q6_k(raw)
    bias = torch.randn(n, device="cuda").bfloat16()
    for m in (1, 4, 8, 64, 65):
        x = torch.randn(m, k, device="cuda").bfloat16()
        for b in (None, bias):
            if m > GEMV_MAX_N and mmq_cuda_routed(T.Q6_K, k, x, sp, split=True):  # split layout only
                want = mmq_cuda_linear(x, sp, n, k, b, qtype=T.Q6_K)
            else:
                want = fused_linear(x, raw, n, k, T.Q6_K, b)
            assert torch.equal(split_linear(x, sp, n, k, b), want), (m, b is None)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [5, 8, 64])
def test_batched_qkv_v_split_equals_gguf(m):
    from orcd.quant.kernels.batched_qkv import batched_qkv
    from orcd.quant.kernels.layout import split_q6_k

    spec = [(T.Q4_K, 3584), (T.Q4_K, 512), (T.Q6_K, 512)]
    ws = [(random_blocks(t, o, 3584, j).cuda(), o, t, torch.randn(o, device="cuda").bfloat16())
          for j, (t, o) in enumerate(spec)]
    x = torch.randn(m, 3584, device="cuda").bfloat16()
    want = batched_qkv(x, ws, 3584)
    ws[2] = (split_q6_k(ws[2][0]), *ws[2][1:])
    got = batched_qkv(x, ws, 3584, split=(False, False, True))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("n,k", SHAPES[:2])
def test_invariant_split_equals_gguf(n, k):
    from orcd.quant.kernels.invariant_linear import invariant_linear
    from orcd.quant.kernels.layout import split_q6_k

    raw = random_blocks(T.Q6_K, n, k, seed=n).cuda()
    x = torch.randn(5, k, device="cuda").bfloat16()
    want = invariant_linear(x, raw, int(T.Q6_K), n)
    assert torch.equal(invariant_linear(x, split_q6_k(raw), int(T.Q6_K), n, split=True), want)
