"""batched_linear (raw-tile tensor-core product for M = 2..64 decode rows) vs the torch dequantize
reference: on CUDA at the 7B shapes and odd shapes, and on the CPU under the Triton interpreter."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from interp_run import check_under_interpreter, interpreter_only

from orcd.quant.dequant import dequantize

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# Qwen2.5-7B Q4_K_M products (out, in): q/o, k/v, gate/up, down, a 16,384-row slice of the LM head;
# odd: out not a multiple of BN, K = 5 blocks of 32 (not a multiple of the 128-input K step)
SHAPES_7B = [(T.Q4_K, 3584, 3584), (T.Q4_K, 512, 3584), (T.Q6_K, 512, 3584), (T.Q4_K, 18944, 3584),
             (T.Q4_K, 3584, 18944), (T.Q6_K, 3584, 18944), (T.Q6_K, 16384, 3584)]
SHAPES_ODD = [(T.Q4_K, 1000, 768), (T.Q6_K, 77, 1280), (T.Q8_0, 301, 160), (T.Q5_0, 130, 896),
              (T.Q8_0, 4864, 896)]


def _ref(x: torch.Tensor, raw: torch.Tensor, qt: T, n: int, k: int) -> torch.Tensor:
    """float64 x @ W.T with W from the torch dequantize path (on the GPU: the 7B matrices are large)."""
    return x.double() @ dequantize(raw, qt, (n, k)).double().T


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt,n,k", SHAPES_7B + SHAPES_ODD, ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("m", [1, 3, 17, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_batched_linear_matches_dequantize(qt, n, k, m, dtype):
    from orcd.quant.kernels.batched_linear import batched_linear

    raw = random_blocks(qt, n, k, seed=m * 31 + n).cuda()
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    bias = torch.randn(n, device="cuda", generator=g).to(dtype) if m == 3 else None
    y = batched_linear(x, raw, n, k, qt, bias=bias)
    ref = _ref(x.float(), raw, qt, n, k) + (bias.double() if bias is not None else 0)
    assert y.shape == (m, n) and y.dtype == dtype
    assert rel_err(y, ref) < TOL[dtype]


@pytest.mark.gpu
@needs_cuda
def test_batched_linear_repeatable_with_split_k():
    """Split-K partials are summed in split order: two runs are bit-identical."""
    from orcd.quant.kernels.batched_linear import batched_linear

    raw = random_blocks(T.Q4_K, 512, 3584, seed=3).cuda()
    x = torch.randn(8, 3584, device="cuda", dtype=torch.bfloat16)
    a = batched_linear(x, raw, 512, 3584, T.Q4_K)
    b = batched_linear(x, raw, 512, 3584, T.Q4_K)
    assert torch.equal(a, b)


@interpreter_only
def test_batched_linear_under_interpreter():
    check_under_interpreter("interp_batched.py", cases=96)


def test_route_by_type_and_size():
    """batched_linear takes Q8_0 always, K-quants from 2^24 weights, never Q5_0 (measured no faster than
    dequantize + cuBLAS on the 72B's ffn_down)."""
    from orcd.quant.kernels.batched_linear import routed

    assert not routed(T.Q5_0, 8192, 7392) and not routed(T.Q5_0, 896, 896)
    assert routed(T.Q8_0, 64, 896) and routed(T.Q4_K, 4096, 4096) and not routed(T.Q4_K, 512, 3584)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt,n,k", [(T.Q4_K, 18944, 3584), (T.Q6_K, 3584, 18944), (T.Q4_K, 3584, 3584),
                                    (T.Q8_0, 4096, 896), (T.Q5_0, 2304, 7392)],
                         ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("m", [5, 8, 64])
def test_fused_linear_routes_batched_rows(qt, n, k, m):
    """QuantLinear's fused path at 5..64 rows: batched_linear where routed(), dequantize + cuBLAS else;
    both against the float64 reference."""
    from orcd.quant.kernels import get_fused_linear
    from orcd.quant.kernels.batched_linear import routed

    assert routed(qt, n, k) == (qt == T.Q8_0 or n * k >= 1 << 24 and qt != T.Q5_0)
    raw = random_blocks(qt, n, k, seed=m).cuda()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = get_fused_linear(qt, "cuda")(x, raw, n, k)
    assert rel_err(y, _ref(x.float(), raw, qt, n, k)) < TOL[torch.bfloat16]
