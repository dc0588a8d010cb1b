"""gemv_cuda_i8 (the CUDA-C one-token Q4_K and split Q6_K products, gemv_cuda.py) on CUDA: against float64
x @ W.T of the dequantized weights at the 7B's shapes and odd ones (3 and 17 rows, 1 and 3 super-blocks,
rows that leave a block part empty), every launch shape, bf16 and fp16, bias and residual; against the Triton
gemv_i8 on the same quantized x (the same products summed in another order); repeatable bit for bit;
inside a CUDA graph with programmatic dependent launch."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, reference, rel_err

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
SHAPES = [(3584, 18944), (3584, 3584), (512, 3584), (896, 4864), (17, 256), (3, 768), (77, 1280)]
LAUNCHES = [(4, 2), (4, 1), (4, 4), (8, 2), (2, 4), (16, 1)]


def _case(qt: T, n: int, k: int, seed: int, dtype=torch.bfloat16):
    """(GGUF's blocks, the kernel's layout of them, x, quantize_x(x))."""
    from orcd.quant.kernels.layout import split_q6_k
    from orcd.quant.kernels.xquant import quantize_x

    raw = random_blocks(qt, n, k, seed=seed).cuda()
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(1, k, device="cuda", generator=g).to(dtype)
    return raw, split_q6_k(raw) if qt == T.Q6_K else raw, x, *quantize_x(x)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q6_K], ids=lambda v: v.name)
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda v: f"{v[0]}x{v[1]}")
def test_gemv_cuda_i8_matches_reference(qt, n, k, launch):
    """x's int8 rounding as gemv_i8's (~1 % of the product); equal to Triton's up to the sum order."""
    from orcd.quant.kernels.gemv_cuda import gemv_cuda_i8
    from orcd.quant.kernels.gemv_int8 import gemv_i8

    gguf, raw, x, xq, xs = _case(qt, n, k, seed=n + k)
    ref = reference(x.float(), gguf, qt, n, k).cuda()
    split = qt == T.Q6_K
    y = gemv_cuda_i8(xq, xs, raw, n, k, int(qt), split=split, launch_shape=launch)
    tri = gemv_i8(xq, xs, raw, n, k, int(qt), split=split)
    assert y.shape == (1, n) and y.dtype == torch.bfloat16
    assert rel_err(y, ref) < 2e-2
    assert rel_err(y, tri.double()) < 5e-3  # both rounded to bf16 once
    assert torch.equal(y, gemv_cuda_i8(xq, xs, raw, n, k, int(qt), split=split, launch_shape=launch))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q6_K], ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias_dtype", [None, "same", torch.float32])
def test_gemv_cuda_i8_bias_and_residual(qt, dtype, bias_dtype):
    """+ bias (in the output's type or float32), + the residual in place, rounded once."""
    from orcd.quant.kernels.gemv_cuda import gemv_cuda_i8

    n, k = 77, 1280
    _, raw, x, xq, xs = _case(qt, n, k, seed=5, dtype=dtype)
    split = qt == T.Q6_K
    g = torch.Generator(device="cuda").manual_seed(9)
    bias = None
    if bias_dtype is not None:
        bias = torch.randn(n, device="cuda", generator=g).to(dtype if bias_dtype == "same" else bias_dtype)
    res = torch.randn(1, n, device="cuda", generator=g).to(dtype)
    plain = gemv_cuda_i8(xq, xs, raw, n, k, int(qt), dtype=dtype, split=split)
    want = plain.float() + res.float() + (bias.float() if bias is not None else 0)
    before = res.clone()
    out = gemv_cuda_i8(xq, xs, raw, n, k, int(qt), bias=bias, residual=res, split=split)
    assert out is res and out.dtype == dtype
    assert not torch.equal(out, before)
    assert rel_err(out, want.double()) < 1e-2


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q6_K], ids=lambda v: v.name)
def test_gemv_cuda_i8_in_a_graph_after_another_kernel(qt):
    """Captured in a CUDA graph right after the kernel that writes x (PDL launch): the same result as
    eager launches, so the wait before reading x holds."""
    from orcd.quant.kernels.gemv_cuda import gemv_cuda_i8
    from orcd.quant.kernels.xquant import quantize_x

    n, k = 3584, 18944
    _, raw, x, xq, xs = _case(qt, n, k, seed=3)
    split = qt == T.Q6_K
    want = gemv_cuda_i8(*quantize_x(x * 2), raw, n, k, int(qt), split=split)
    xin = x.clone()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = gemv_cuda_i8(*quantize_x(xin * 2), raw, n, k, int(qt), split=split)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)


def test_gemv_cuda_i8_refuses_bad_shapes():
    from orcd.quant.kernels.gemv_cuda import gemv_cuda_i8

    raw = torch.zeros(4 * 144, dtype=torch.uint8)
    with pytest.raises(ValueError, match="K % 256"):
        gemv_cuda_i8(torch.zeros(1, 80, dtype=torch.int32), torch.zeros(1, 10, 4), raw, 4, 320)
    with pytest.raises(ValueError, match="raw must be"):
        gemv_cuda_i8(torch.zeros(1, 64, dtype=torch.int32), torch.zeros(1, 8, 4), raw[:-16], 4, 256)
    with pytest.raises(ValueError, match="split Q6_K"):
        gemv_cuda_i8(torch.zeros(1, 64, dtype=torch.int32), torch.zeros(1, 8, 4), raw, 4, 256, 14)


MIXES = [(T.Q4_K, T.Q4_K, T.Q4_K), (T.Q4_K, T.Q4_K, T.Q6_K), (T.Q6_K, T.Q4_K, T.Q6_K)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("types", MIXES, ids=lambda v: "-".join(t.name for t in v))
@pytest.mark.parametrize("outs,k", [((3584, 512, 512), 3584), ((77, 17, 3), 1280)])
@pytest.mark.parametrize("bias", [False, True])
def test_gemv3_cuda_i8_matches_triton(types, outs, k, bias):
    """q, k, v in one launch: each equal to the Triton gemv3_i8's up to the sum order, and to float64."""
    from orcd.quant.kernels.gemv3_int8 import gemv3_i8
    from orcd.quant.kernels.gemv_cuda import gemv3_cuda_i8
    from orcd.quant.kernels.layout import split_q6_k
    from orcd.quant.kernels.xquant import quantize_x

    g = torch.Generator(device="cuda").manual_seed(k + len(outs))
    x = torch.randn(1, k, device="cuda", generator=g).to(torch.bfloat16)
    xq, xs = quantize_x(x)
    weights, refs = [], []
    for j, (qt, n) in enumerate(zip(types, outs, strict=True)):
        raw = random_blocks(qt, n, k, seed=j * 7 + n).cuda()
        b = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if bias else None
        refs.append(reference(x.float(), raw, qt, n, k).cuda() + (b.double() if bias else 0))
        weights.append((split_q6_k(raw) if qt == T.Q6_K else raw, n, int(qt), b))
    split = tuple(qt == T.Q6_K for qt in types)
    ys = gemv3_cuda_i8(xq, xs, weights, k, torch.bfloat16, split=split)
    tri = gemv3_i8(xq, xs, weights, k, torch.bfloat16, split=split)
    for y, t, ref, n in zip(ys, tri, refs, outs, strict=True):
        assert y.shape == (1, n)
        assert rel_err(y, ref) < 2e-2
        assert rel_err(y, t.double()) < 5e-3
    assert all(torch.equal(a, b) for a, b in zip(ys, gemv3_cuda_i8(xq, xs, weights, k, torch.bfloat16,
                                                                      split=split), strict=True))

