"""Fused dequant-matmul kernels vs the torch dequantize path, on random blocks, on CUDA."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, reference, rel_err

from orcd.quant.kernels import get_fused_linear

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# (out, in) like Qwen2.5-0.5B's q/o, gate/up, down and a slice of the LM head; K-quants need in % 256 == 0
SHAPES = {
    T.Q8_0: [(896, 896), (4864, 896), (4096, 896)],
    T.Q5_0: [(896, 896), (128, 896), (4864, 896)],
    T.Q4_K: [(896, 4864), (512, 1024)],
    T.Q6_K: [(896, 4864), (512, 1024)],
}
CASES = [(qt, o, i) for qt, shapes in SHAPES.items() for (o, i) in shapes]


@pytest.mark.parametrize("qtype,out_f,in_f", CASES, ids=[f"{c[0].name}-{c[1]}x{c[2]}" for c in CASES])
@pytest.mark.parametrize("n", [1, 2, 4, 7, 16, 33, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_linear_matches_dequantize(qtype, out_f, in_f, n, dtype):
    fused = get_fused_linear(qtype, "cuda")
    assert fused is not None
    raw = random_blocks(qtype, out_f, in_f, seed=n * 7 + out_f)
    x = torch.randn(n, in_f, generator=torch.Generator().manual_seed(n)).to(dtype)
    y = fused(x.cuda(), raw.cuda(), out_f, in_f)
    assert y.dtype == dtype and y.shape == (n, out_f)
    assert rel_err(y, reference(x, raw, qtype, out_f, in_f)) < TOL[dtype]



@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K])
def test_gemv_norm_residual_bias_and_glu(qtype):
    """fused_gemv's RMSNorm prologue, bias and residual epilogue; fused_glu; vs torch in float32."""
    from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu

    out_f, in_f, n = 256, 512, 2
    g = torch.Generator().manual_seed(5)
    raw, raw2 = random_blocks(qtype, out_f, in_f, 1), random_blocks(qtype, out_f, in_f, 2)
    x = torch.randn(n, in_f, generator=g) * 3
    nw, bias, res = torch.randn(in_f, generator=g), torch.randn(out_f, generator=g), torch.randn(n, out_f)
    xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * nw
    ref = reference(xn, raw, qtype, out_f, in_f) + bias.double()
    y = fused_gemv(x.cuda(), raw.cuda(), out_f, in_f, qtype, bias.cuda(), norm=(nw.cuda(), 1e-6))
    assert rel_err(y, ref) < 1e-5
    r = res.cuda()
    out = fused_gemv(x.cuda(), raw.cuda(), out_f, in_f, qtype, residual=r)
    assert out.data_ptr() == r.data_ptr()
    assert rel_err(r, reference(x, raw, qtype, out_f, in_f) + res.double()) < 1e-5
    glu = fused_glu(x.cuda(), raw.cuda(), raw2.cuda(), out_f, in_f, qtype, norm=(nw.cuda(), 1e-6))
    a, b = reference(xn, raw, qtype, out_f, in_f), reference(xn, raw2, qtype, out_f, in_f)
    assert rel_err(glu, torch.nn.functional.silu(a) * b) < 1e-5


@pytest.mark.parametrize("with_bias", [False, True])
def test_gemv3_mixed_types(with_bias):
    """q, k, v in one launch with different types (as in Q4_K_M files), norm prologue, biases."""
    from orcd.quant.kernels.gemv_multi import fused_gemv3

    in_f, n = 512, 3
    g = torch.Generator().manual_seed(9)
    specs = [(T.Q5_0, 512), (T.Q4_K, 64), (T.Q8_0, 100)]
    raws = [random_blocks(qt, o, in_f, i) for i, (qt, o) in enumerate(specs)]
    biases = [torch.randn(o, generator=g) if with_bias else None for _, o in specs]
    x, nw = torch.randn(n, in_f, generator=g), torch.randn(in_f, generator=g)
    xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * nw
    ys = fused_gemv3(x.cuda().bfloat16(), [(r.cuda(), o, qt, b.cuda().bfloat16() if b is not None else None)
                                           for r, (qt, o), b in zip(raws, specs, biases, strict=True)],
                     in_f, norm=(nw.cuda().bfloat16(), 1e-5))
    for y, r, (qt, o), b in zip(ys, raws, specs, biases, strict=True):
        ref = reference(xn, r, qt, o, in_f) + (b.double() if b is not None else 0)
        assert y.shape == (n, o) and rel_err(y, ref) < 2e-2
