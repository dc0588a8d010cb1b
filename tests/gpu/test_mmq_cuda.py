"""mmq_cuda_linear (CUDA-C tensor-core products over raw Q4_K blocks and split Q6_K blocks, 1..64 decode
rows) on CUDA: against x @ W.T from the torch dequantize path at the 7B's Q4_K and Q6_K shapes and odd
shapes (rows past a 16-row tile, 3 and 5 super-blocks), bf16 and fp16, every launch shape, repeatable
bit for bit; fused_linear's and split_linear's routes."""

from __future__ import annotations

import contextlib

import pytest
import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, rel_err
from mmq_cases import float_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# (type, out, in): the 7B's Q4_K q/o, k, gate/up, down and Q6_K v, down, a slice of the LM head; a TP=2
# rank's o and gate/up (7 super-blocks; 74 WIDE tiles at 64 rows); odd
SHAPES = [(T.Q4_K, 3584, 3584), (T.Q4_K, 512, 3584), (T.Q4_K, 18944, 3584), (T.Q4_K, 3584, 18944),
          (T.Q4_K, 3584, 1792), (T.Q4_K, 9472, 3584),
          (T.Q4_K, 1000, 768), (T.Q4_K, 77, 1280), (T.Q6_K, 512, 3584), (T.Q6_K, 3584, 18944),
          (T.Q6_K, 16384, 3584), (T.Q6_K, 77, 1280)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("qt,n,k", SHAPES, ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("m", [1, 3, 5, 8, 12, 17, 64])
def test_mmq_cuda_matches_reference(qt, n, k, m):
    """W rounded to x's type, x not rounded: < 1e-2 from float64 x @ W.T in bf16, < 5e-3 in fp16."""
    from orcd.quant.kernels.layout import split_q6_k
    from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear

    raw = random_blocks(qt, n, k, seed=m * 31 + n).cuda()
    w = split_q6_k(raw) if qt == T.Q6_K else raw
    g = torch.Generator(device="cuda").manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if m in (3, 17) else None
    ref = float_reference(x, raw, qt, n, k) + (bias.double() if bias is not None else 0)
    y = mmq_cuda_linear(x, w, n, k, bias=bias, qtype=qt)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16 and rel_err(y, ref) < 1e-2
    assert torch.equal(y, mmq_cuda_linear(x, w, n, k, bias=bias, qtype=qt))
    y = mmq_cuda_linear(x.half(), w, n, k, bias=bias, qtype=qt)
    assert y.dtype == torch.float16 and rel_err(y, ref) < 5e-3
    if bias is not None:  # a bias in x's own type is read as it is (bias_arg kind 2): as its fp32 copy
        for xx, bb in ((x, bias), (x.half(), bias.half())):
            want = mmq_cuda_linear(xx, w, n, k, bias=bb.float(), qtype=qt)
            assert torch.equal(mmq_cuda_linear(xx, w, n, k, bias=bb, qtype=qt), want)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("launch", [(1, 1), (2, 4), (4, 2), (8, 1), (16, 1), (4, 2, 1), (4, 1, 3), (8, 2, 9),
                                    (2, 4, 2), (16, 1, 4)], ids=str)
def test_mmq_cuda_launch_shapes(launch):
    """Every (warps, tiles) and WIDE (warps, tiles, K ranges) gives the reference's value (fp16 x, 40
    rows: five token tiles; 9 super-blocks: 9 ranges of one, 3 of three, 2 of five and four)."""
    from orcd.quant.kernels.layout import split_q6_k
    from orcd.quant.kernels.mmq_cuda import check_launch, mmq_cuda_linear

    n, k = 1000, 2304
    check_launch(*launch[:2], 5, wide=len(launch) == 3)
    x = torch.randn(40, k, device="cuda").half()
    for qt in (T.Q4_K, T.Q6_K):
        raw = random_blocks(qt, n, k, seed=7).cuda()
        w = split_q6_k(raw) if qt == T.Q6_K else raw
        y = mmq_cuda_linear(x, w, n, k, launch=launch, qtype=qt)
        assert rel_err(y, float_reference(x, raw, qt, n, k)) < 5e-3, qt.name


def test_mmq_cuda_refuses_bad_launches_and_input():
    from orcd.quant.kernels.mmq_cuda import check_launch, default_launch, mmq_cuda_linear

    with pytest.raises(ValueError, match="48 KiB"):
        check_launch(16, 4, 8)
    with pytest.raises(ValueError, match="MT 1, 2 or 4"):
        check_launch(4, 3, 1)
    for k, m in [(3584, 8), (18944, 16), (18944, 64)]:
        check_launch(*default_launch(k, m), -(-m // 8))  # the defaults always fit
    for n, k, m in [(512, 3584, 17), (18944, 3584, 64), (3584, 18944, 32), (77, 1280, 64), (3584, 18944, 9)]:
        launch = default_launch(k, m, n)  # WIDE: (NW, MT, KS), KS ranges of >= 2 super-blocks
        check_launch(*launch[:2], -(-m // 8), wide=len(launch) == 3)
        assert len(launch) == 2 or 1 <= launch[2] <= max(1, k // 512)
    assert len(default_launch(3584, 64, 512)) == 2 and len(default_launch(18944, 64, 3584)) == 3
    with pytest.raises(ValueError, match="in % 256"):
        mmq_cuda_linear(torch.zeros(65, 256), torch.zeros(1, 144, dtype=torch.uint8), 1, 256)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        mmq_cuda_linear(torch.zeros(2, 256), torch.zeros(1, 144, dtype=torch.uint8), 1, 256)
    with pytest.raises(ValueError, match="Q4_K or Q6_K"):
        mmq_cuda_linear(torch.zeros(2, 256), torch.zeros(1, 34 * 8, dtype=torch.uint8), 1, 256, qtype=T.Q8_0)


def test_mmq_cuda_sources_ship_with_the_package():
    """Every file the kernels compile from is readable through the package and matched by pyproject's
    package-data (a wheel without a header would leave `available` False on every GPU)."""
    import fnmatch
    from pathlib import Path

    from orcd.quant.kernels.mmq_cuda import KERNELS, _source

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    root = Path(__file__).resolve().parents[2]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["orcd"]
    names = ["scalars.cuh", "common.cuh", "w16.cuh", *(k + ".cu" for k in KERNELS.values()),
             "mmq_legacy_w16.cu", "gemv.cuh", "gemv_q4k_i8.cu", "gemv_q6k_i8.cu",
             "gemv3_i8.cu"]
    files = sorted(p.name for p in (root / "orcd/quant/kernels/cuda").iterdir())
    assert sorted(names) == files
    for name in names:
        assert "__global__" in _source(name) or "__device__" in _source(name)
        assert any(fnmatch.fnmatch(f"quant/kernels/cuda/{name}", pat) for pat in patterns), name


def test_mmq_cuda_unavailable_where_nvrtc_fails(monkeypatch, caplog):
    """A CUDA device whose NVRTC compile fails (a torch without libnvrtc) makes `available` False with a
    warning, so the Triton kernels keep the batches; CPU devices are never available. (The compile is
    torch's: replaced here by one that fails, on a CUDA device the test pretends to have.)"""
    from orcd.quant.kernels import mmq_cuda

    assert not mmq_cuda.available("cpu")
    mmq_cuda._available.cache_clear()

    def fail(*args, **kwargs):
        raise RuntimeError("libnvrtc.so: cannot open shared object file")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "_compile_kernel", fail)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    mmq_cuda._kernel.cache_clear()
    try:
        assert not mmq_cuda.available("cuda:0")
        assert "CUDA-C decode kernels unavailable" in caplog.text
    finally:
        mmq_cuda._available.cache_clear()
        mmq_cuda._kernel.cache_clear()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [5, 16, 17, 32, 33, 64])
def test_fused_linear_routes_q4k_batches_here(m):
    """fused_linear sends 5..ROUTED rows of 16-bit x here, more to mmq.py's bf16-w path."""
    from orcd.quant.kernels.fused_linear import fused_linear
    from orcd.quant.kernels.mmq import mmq_linear
    from orcd.quant.kernels.mmq_cuda import ROUTED, available, mmq_cuda_linear

    assert available("cuda") == (torch.cuda.get_device_capability() >= (8, 0))
    raw = random_blocks(T.Q4_K, 3584, 3584, seed=m).cuda()
    x = torch.randn(m, 3584, device="cuda", dtype=torch.bfloat16)
    y = fused_linear(x, raw, 3584, 3584, int(T.Q4_K))
    if available("cuda") and m <= ROUTED[T.Q4_K, False]:
        assert torch.equal(y, mmq_cuda_linear(x, raw, 3584, 3584))
    else:
        assert torch.equal(y, mmq_linear(x, raw, 3584, 3584, T.Q4_K, float_w=True))
