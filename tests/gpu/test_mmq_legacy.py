"""mmq_legacy_linear (CUDA-C tensor-core products over raw Q5_0 and Q8_0 blocks, 1..64 decode rows) on
CUDA: against float64 x @ W.T from the torch dequantize path at the 72B's down shapes (one GPU and a TP=4
rank's: an odd number of 32-input blocks), gpt-oss's attention shapes and odd ones (rows past a 16-row
tile, 3 blocks), bf16 and fp16, every launch shape, repeatable bit for bit; fused_linear's route."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from mmq_cases import float_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# (out, in): the 72B's ffn_down on one GPU and a TP=4 rank (231 blocks), gpt-oss's q and o, odd
SHAPES = [(8192, 29568), (8192, 7392), (4096, 2880), (2880, 4096), (77, 96), (1000, 800)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q5_0, T.Q8_0], ids=lambda v: v.name)
@pytest.mark.parametrize("n,k", SHAPES, ids=str)
@pytest.mark.parametrize("m", [1, 3, 5, 8, 12, 17, 64])
def test_mmq_legacy_matches_reference(qt, n, k, m):
    """W rounded to x's type, x not rounded: < 1e-2 from float64 x @ W.T in bf16, < 5e-3 in fp16."""
    from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear

    raw = random_blocks(qt, n, k, seed=m * 31 + n).cuda()
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if m in (3, 17) else None
    ref = float_reference(x, raw, qt, n, k) + (bias.double() if bias is not None else 0)
    y = mmq_legacy_linear(x, raw, n, k, qt, bias=bias)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16 and rel_err(y, ref) < 1e-2
    assert torch.equal(y, mmq_legacy_linear(x, raw, n, k, qt, bias=bias))
    y = mmq_legacy_linear(x.half(), raw, n, k, qt, bias=bias)
    assert y.dtype == torch.float16 and rel_err(y, ref) < 5e-3
    if bias is not None:  # a bias in x's own type is read as it is (bias_arg kind 2): as its fp32 copy
        for xx, bb in ((x, bias), (x.half(), bias.half())):
            want = mmq_legacy_linear(xx, raw, n, k, qt, bias=bb.float())
            assert torch.equal(mmq_legacy_linear(xx, raw, n, k, qt, bias=bb), want)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("launch", [(1, 1, 1, 0), (2, 4, 2, 0), (4, 2, 4, 0), (8, 1, 8, 0), (16, 1, 2, 0),
                                    (4, 2, 4, 3), (2, 4, 8, 2), (4, 1, 1, 5), (8, 1, 2, 1)], ids=str)
def test_mmq_legacy_launch_shapes(launch):
    """Every (warps, tiles, blocks a turn, K ranges) gives the reference's value (fp16 x, 40 rows: five
    token tiles; 23 blocks: the warps' last turn part-empty, WIDE's last chunk of 7 blocks, 3 chunks in
    3, 2 and 1 ranges)."""
    from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear

    n, k = 1000, 736
    x = torch.randn(40, k, device="cuda").half()
    for qt in (T.Q5_0, T.Q8_0):
        raw = random_blocks(qt, n, k, seed=7).cuda()
        y = mmq_legacy_linear(x, raw, n, k, qt, launch=launch)
        assert rel_err(y, float_reference(x, raw, qt, n, k)) < 5e-3, (qt, launch)


@pytest.mark.gpu
@needs_cuda
def test_mmq_legacy_refuses_bad_input():
    from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear

    raw = random_blocks(T.Q5_0, 64, 96, seed=1).cuda()
    x = torch.randn(4, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="Q5_0 or Q8_0"):
        mmq_legacy_linear(x, raw, 64, 96, T.Q4_K)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        mmq_legacy_linear(x.float(), raw, 64, 96, T.Q5_0)
    with pytest.raises(ValueError, match="raw must be"):
        mmq_legacy_linear(x, raw[:32], 64, 96, T.Q5_0)
    with pytest.raises(ValueError, match="x \\[1..64"):
        mmq_legacy_linear(torch.randn(65, 96, device="cuda", dtype=torch.bfloat16), raw, 64, 96, T.Q5_0)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt", [T.Q5_0, T.Q8_0], ids=lambda v: v.name)
@pytest.mark.parametrize("m", [5, 16, 17, 64, 65])
def test_fused_linear_routes_legacy_batches_here(qt, m):
    """fused_linear sends 5..ROUTED rows of 16-bit x here (Q8_0: 16 at this size), more elsewhere."""
    from orcd.quant.kernels.fused_linear import fused_linear
    from orcd.quant.kernels.mmq_cuda import available
    from orcd.quant.kernels.mmq_legacy import ROUTED, mmq_legacy_linear

    raw = random_blocks(qt, 2880, 4096, seed=m).cuda()
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    y = fused_linear(x, raw, 2880, 4096, int(qt))
    if available("cuda") and m <= ROUTED[qt][0]:  # 4096 inputs: not LONG_K
        assert torch.equal(y, mmq_legacy_linear(x, raw, 2880, 4096, qt))
    else:
        assert rel_err(y, float_reference(x, raw, qt, 2880, 4096)) < 1e-2


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [17, 64])
def test_fused_linear_routes_long_q8_0_batches_here(m):
    """Q8_0 rows longer than LONG_K inputs come here up to 64 rows, shorter ones past 16 rows do not."""
    from orcd.quant.kernels.fused_linear import fused_linear
    from orcd.quant.kernels.mmq_cuda import available
    from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear, mmq_legacy_routed

    raw = random_blocks(T.Q8_0, 1024, 16384, seed=m).cuda()
    x = torch.randn(m, 16384, device="cuda", dtype=torch.bfloat16)
    assert mmq_legacy_routed(T.Q8_0, x, raw, 1024, 16384) == available("cuda")
    assert not mmq_legacy_routed(T.Q8_0, x[:, :8192], raw, 2048, 8192)
    if available("cuda"):
        y = fused_linear(x, raw, 1024, 16384, int(T.Q8_0))
        assert torch.equal(y, mmq_legacy_linear(x, raw, 1024, 16384, T.Q8_0))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("rows", [5, 8])
def test_unfused_step_down_rows_take_mmq_legacy(rows):
    """DecodeProducts.down_rows sends a 16-bit Q5_0 down of <= LEGACY_ROWS_MAX rows here (faster than its
    int8 GEMV), where the kernel runs."""
    from types import SimpleNamespace

    from orcd.quant.kernels.mmq_cuda import available
    from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear
    from orcd.runner.decode_products import DecodeProducts

    raw = random_blocks(T.Q5_0, 520, 14784, seed=rows).cuda()
    dn = SimpleNamespace(qtype=int(T.Q5_0), raw=raw, out_features=520, in_features=14784, bias=None)
    a = torch.randn(rows, 14784, device="cuda", dtype=torch.bfloat16)
    y = DecodeProducts(int8_x=True, int8_attn=True).down_rows(SimpleNamespace(down=dn), a)
    assert rel_err(y, float_reference(a, raw, T.Q5_0, 520, 14784)) < 1e-2
    if available("cuda"):
        assert torch.equal(y, mmq_legacy_linear(a, raw, 520, 14784, T.Q5_0))
