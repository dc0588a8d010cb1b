"""mmq_linear (int8 tensor-core product over raw Q4_K / Q6_K blocks, 5..64 decode rows): against the exact
float64 value of its int8 arithmetic and the torch dequantize reference, on CUDA at the 7B shapes and odd
shapes, and on the CPU under the Triton interpreter (small shapes)."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from interp_run import check_under_interpreter, interpreter_only
from mmq_cases import check_quantized_x, exact_reference, float_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# Qwen2.5-7B Q4_K_M products (out, in): q/o, k/v, v, gate/up, down (both types), a 16,384-row slice of
# the LM head; odd: out not a multiple of BN, K = 3 and 5 super-blocks (uneven split-K)
SHAPES_7B = [(T.Q4_K, 3584, 3584), (T.Q4_K, 512, 3584), (T.Q6_K, 512, 3584), (T.Q4_K, 18944, 3584),
             (T.Q4_K, 3584, 18944), (T.Q6_K, 3584, 18944), (T.Q6_K, 16384, 3584)]
SHAPES_ODD = [(T.Q4_K, 1000, 768), (T.Q6_K, 77, 1280)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt,n,k", SHAPES_7B + SHAPES_ODD, ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("m", [1, 3, 17, 64])
def test_mmq_matches_references(qt, n, k, m):
    """int8 path: ~1e-7 from its exact arithmetic, < 2e-2 from x @ W.T (x rounded to int8 per 32);
    float_w path: < 1e-2 from x @ W.T (bf16 weights)."""
    from orcd.quant.kernels.mmq import mmq_linear

    raw = random_blocks(qt, n, k, seed=m * 31 + n).cuda()
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if m == 3 else None
    b64 = bias.double() if bias is not None else 0
    y = mmq_linear(x.float(), raw, n, k, qt, bias=bias.float() if bias is not None else None)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert rel_err(y, exact_reference(x, raw, qt, n, k) + b64) < 1e-5
    ref = float_reference(x, raw, qt, n, k) + b64
    y = mmq_linear(x, raw, n, k, qt, bias=bias)
    assert y.dtype == torch.bfloat16 and rel_err(y, ref) < 2e-2
    y = mmq_linear(x, raw, n, k, qt, bias=bias, float_w=True)
    assert rel_err(y, ref) < 1e-2


@pytest.mark.gpu
@needs_cuda
def test_mmq_quantized_x_and_repeatable_split_k():
    """x's int8 blocks match the torch definition; split-K partials are summed in split order: two runs
    are bit-identical."""
    from orcd.quant.kernels.mmq import mmq_linear, mmq_plan

    x = torch.randn(16, 3584, device="cuda", dtype=torch.bfloat16) * 3
    assert check_quantized_x(x) < 1e-3
    raw = random_blocks(T.Q4_K, 512, 3584, seed=3).cuda()
    assert mmq_plan(T.Q4_K, 16, 512, 3584)[4] < 14  # K is split
    assert torch.equal(mmq_linear(x, raw, 512, 3584, T.Q4_K), mmq_linear(x, raw, 512, 3584, T.Q4_K))


@interpreter_only
def test_mmq_under_interpreter():
    check_under_interpreter("interp_mmq.py", cases=22)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q6_K], ids=lambda v: v.name)
@pytest.mark.parametrize("m", [5, 16, 64])
def test_fused_linear_route(qt, m):
    """fused_linear at 5..64 rows of bf16 x: Q4_K through mmq_cuda (where it compiles) or mmq's bf16-w
    path, Q6_K (7B ffn_down, large enough for batched_linear.routed) through batched_linear, bit for bit
    the same calls; fp32 x never through mmq."""
    from orcd.quant.kernels.batched_linear import batched_linear, routed
    from orcd.quant.kernels.fused_linear import fused_linear
    from orcd.quant.kernels.mmq import mmq_linear, mmq_routed
    from orcd.quant.kernels.mmq_cuda import ROUTED, available, mmq_cuda_linear

    n, k = (3584, 3584) if qt == T.Q4_K else (3584, 18944)
    raw = random_blocks(qt, n, k, seed=m).cuda()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = fused_linear(x, raw, n, k, int(qt))
    if qt == T.Q4_K and available("cuda") and m <= ROUTED[T.Q4_K, False]:  # CUDA C (test_mmq_cuda.py)
        assert torch.equal(y, mmq_cuda_linear(x, raw, n, k))
    elif qt == T.Q4_K:
        assert torch.equal(y, mmq_linear(x, raw, n, k, qt, float_w=True))
    else:
        assert routed(qt, n, k) and torch.equal(y, batched_linear(x, raw, n, k, qt))
    assert not mmq_routed(qt, k, torch.float32)
