"""The CUDA-C decode kernels (orcd/quant/kernels/cuda/, compiled on a GPU at run time by torch's NVRTC)
compiled here on the CPU by NVRTC itself (the `nvidia-cuda-nvrtc-cu12` wheel of the test extras) for
compute capability 9.0, at every configuration the routes take (rows 5..16 of bf16 / fp16 x, with and
without a bias, the default warps for short and long rows) and the wider launches the bench and the GPU
tests use: a typo in the C or in its inline PTX fails here, before any GPU time is spent. The PTX holds
one tensor-core product per 16 inputs per 16-row tile per 8-token tile (8 sub-blocks x 2 words a
super-block). What the kernels compute is tested on the GPU (tests/gpu/test_mmq_cuda.py)."""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

import pytest

from orcd.quant.kernels.mmq_cuda import KERNELS, default_launch, kernel_source
from orcd.quant.kernels.mmq_legacy import KERNELS as LEGACY
from orcd.quant.kernels.mmq_legacy import default_launch as legacy_launch
from orcd.quant.kernels.mmq_legacy import legacy_source


def _nvrtc():
    spec = importlib.util.find_spec("nvidia.cuda_nvrtc") if importlib.util.find_spec("nvidia") else None
    if spec is None or not spec.submodule_search_locations or not sys.platform.startswith("linux"):
        return None
    libs = sorted(Path(next(iter(spec.submodule_search_locations)), "lib").glob("libnvrtc.so.*"))
    return ctypes.CDLL(str(libs[0])) if libs else None


NVRTC = _nvrtc()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="needs the nvidia-cuda-nvrtc-cu12 wheel (test extras)")


def compile_ptx(source: str) -> str:
    """PTX for compute_90, or AssertionError with NVRTC's log."""
    prog = ctypes.c_void_p()
    assert NVRTC.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90", b"-default-device"]
    rc = NVRTC.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    if rc != 0:
        NVRTC.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        NVRTC.nvrtcGetProgramLog(prog, log)
        raise AssertionError(log.value.decode())
    NVRTC.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    NVRTC.nvrtcGetPTX(prog, ptx)
    NVRTC.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def configurations() -> list[tuple[int, int, int, int, int, bool]]:
    """(NW, MT, TT, out kind, bias kind (mmq_cuda.bias_arg's), WIDE): the routed ones (default_launch at
    the 7B's shapes, 5..64 rows), then the bench's and the GPU tests' other launches."""
    routed = set()
    for k, n in [(3584, 512), (3584, 3584), (3584, 18944), (18944, 3584), (3584, 152064)]:
        for m in (5, 9, 16, 17, 32, 64):
            launch = default_launch(k, m, n)
            for kind in (0, 1):
                for bias in (0, 1, 2):
                    routed.add((*launch[:2], -(-m // 8), kind, bias, len(launch) == 3))
    others = [(4, 2, 8, 0, 1, False), (2, 4, 5, 1, 0, False), (1, 1, 1, 0, 0, False),
              (8, 1, 8, 0, 0, True), (4, 4, 4, 1, 2, True), (4, 1, 2, 0, 0, True)]
    return sorted(routed) + others


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(KERNELS.values()))
def test_cuda_kernels_compile_for_sm90(name):
    for nw, mt, tt, kind, bias, wide in configurations():
        ptx = compile_ptx(kernel_source(name, nw, mt, tt, kind, bias, wide))
        assert f".entry {name}(" in ptx
        assert ptx.count("mma.sync.aligned.m16n8k16") == 16 * mt * tt, (nw, mt, tt, wide)
        assert ".local" not in ptx, f"an array in local memory (indexed at run time) at {(nw, mt, tt, wide)}"


@needs_nvrtc
def test_a_broken_source_fails_to_compile():
    """The canary: NVRTC here refuses what the GPU's would (a misspelled PTX type in an asm string is
    only caught by the PTX assembler, not here: the mma count above and the GPU tests cover those)."""
    src = kernel_source(KERNELS[12], 8, 1, 1, 0, False).replace("uint4 xb[TT];", "uint4 xb[TT]")
    with pytest.raises(AssertionError, match="error"):
        compile_ptx(src)


@needs_nvrtc
@pytest.mark.parametrize("qtype", sorted(LEGACY), ids=lambda q: LEGACY[q][0])
def test_legacy_kernels_compile_for_sm90(qtype):
    """mmq_legacy_w16.cu (Q5_0, Q8_0) at its routed launches (5..64 rows, short and long outputs) and
    the GPU tests' others: U blocks a turn, two products a block, the block's scale applied in fp32."""
    launches = {(*legacy_launch(m, n, k), -(-m // 8)) for m in (5, 9, 16, 17, 33, 64)
                for n, k in ((2880, 4096), (8192, 29568))}
    launches |= {(1, 1, 1, 0, 1), (2, 4, 2, 0, 5), (16, 1, 8, 0, 5), (4, 2, 4, 3, 5), (2, 4, 8, 2, 5),
                 (4, 1, 1, 5, 5)}
    for nw, mt, u, ks, tt in sorted(launches):
        for kind, bias in ((0, 0), (1, 1), (0, 2), (1, 2)):  # bias: mmq_cuda.bias_arg's kind
            ptx = compile_ptx(legacy_source(qtype, nw, mt, tt, kind, bias, u, ks > 0))
            assert f".entry {LEGACY[qtype][0]}(" in ptx
            assert ptx.count("mma.sync.aligned.m16n8k16") == 2 * u * mt * tt, (nw, mt, u, ks, tt)
            # each block's fp32 sums scaled by its d: one fma per C element, 4 a tile and token tile
            assert ptx.count("fma.rn.f32") == 4 * u * mt * tt, (nw, mt, u, ks, tt)
            assert ".local" not in ptx, f"an array in local memory at {(nw, mt, u, ks, tt)}"


@needs_nvrtc
@pytest.mark.parametrize("name,dots", [("gemv_q4k_i8", 8), ("gemv_q6k_i8", 16)])
def test_gemv_cuda_compiles_for_sm90(name, dots):
    """gemv_cuda.py's kernels at the launch shapes the bench and the GPU tests take, with and without the
    bias, the residual and the PDL wait: 8 (Q4_K) or 16 (Q6_K) dp4a per row per lane's share of a
    super-block, no local memory."""
    from orcd.quant.kernels.gemv_cuda import kernel_source as gemv_source

    for nw, r in [(4, 2), (4, 1), (4, 4), (8, 1), (8, 2), (2, 2), (2, 4), (16, 1)]:
        for kind, bias, res, pdl in [(0, 0, True, True), (1, 2, False, False), (0, 1, False, True)]:
            ptx = compile_ptx(gemv_source(name, nw, r, kind, bias, res, pdl))
            assert f".entry {name}(" in ptx
            assert ptx.count("dp4a.s32.s32") == dots * r, (nw, r)
            assert ("griddepcontrol.wait" in ptx) == pdl
            assert ".local" not in ptx, (nw, r)


@needs_nvrtc
def test_gemv3_cuda_compiles_for_sm90():
    """gemv_cuda.py's q/k/v kernel for the type mixes a model can hand it, with and without biases."""
    from orcd.quant.kernels.gemv_cuda import GEMV3
    from orcd.quant.kernels.gemv_cuda import kernel_source as gemv_source

    for types in [(12, 12, 12), (12, 12, 14), (14, 14, 14)]:
        for nw, r in [(2, 2), (4, 2)]:
            for bias in (0, 1, 2):
                ptx = compile_ptx(gemv_source(GEMV3, nw, r, 0, bias, False, True, types))
                assert f".entry {GEMV3}(" in ptx
                assert ".local" not in ptx, (types, nw, r)
