"""gemv_cuda.py's parts that run without a GPU: the driver structs its PDL launch passes to
cuLaunchKernelEx (their layout is the C ABI's, or the driver reads garbage), which products it routes, its
launch rule and the source text of each kernel. What the kernels compute: tests/gpu/test_gemv_cuda.py."""

from __future__ import annotations

import ctypes

import torch

from orcd.quant.kernels import gemv_cuda


def test_launch_structs_match_the_driver_abi():
    """CUlaunchConfig: 6 dims, shared bytes, the stream at 32, attrs at 40, their count at 48 (56 bytes);
    CUlaunchAttribute: the id, 4 bytes of padding, a 64-byte value union (72 bytes)."""
    cfg = gemv_cuda._Config
    assert ctypes.sizeof(cfg) == 56
    assert [cfg.grid.offset, cfg.block.offset, cfg.shared.offset] == [0, 12, 24]
    assert [cfg.stream.offset, cfg.attrs.offset, cfg.num_attrs.offset] == [32, 40, 48]
    assert ctypes.sizeof(gemv_cuda._Attr) == 72 and gemv_cuda._Attr.value.offset == 8


def test_routes_only_one_token_of_its_types_on_a_gpu():
    """On the CPU nothing is routed (the Triton interpreter and torch paths keep every product); the
    (type, layout) pairs are Q4_K on GGUF's blocks and Q6_K split only."""
    xq = torch.zeros(1, 64, dtype=torch.int32)
    raw = torch.zeros(4 * 144, dtype=torch.uint8)
    assert not gemv_cuda.routed(xq, raw, 256, 12, False)
    assert set(gemv_cuda.KERNELS) == {(12, False), (14, True)}
    assert not gemv_cuda.gemv3_routed(xq, [(raw, 4, 12, None)] * 3, 256, (False,) * 3)


def test_launch_by_output_rows():
    assert gemv_cuda.default_launch(3584) == (2, 2) == gemv_cuda.default_launch(gemv_cuda.WIDE_ROWS)
    assert gemv_cuda.default_launch(896) == (4, 2) == gemv_cuda.default_launch(gemv_cuda.WIDE_ROWS - 1)


def test_kernel_sources():
    """Each kernel after scalars.cuh and gemv.cuh with its defines; the q/k/v kernel after both GEMVs'
    sources (it calls their row functions), with its three types."""
    src = gemv_cuda.kernel_source("gemv_q4k_i8", 2, 2, 0, 0, True, True)
    head = "#define NW 2\n#define R 2\n#define OUT_KIND 0\n#define HAS_BIAS 0\n#define RES 1\n#define PDL 1\n"
    assert src.startswith(head)
    assert src.index("half_to_float") < src.index("store_rows") < src.index("gemv_q4k_i8(")
    assert "q6k_rows" not in src
    src3 = gemv_cuda.kernel_source(gemv_cuda.GEMV3, 4, 2, 1, 2, False, False, (12, 12, 14))
    assert "#define QA 12\n#define QB 12\n#define QC 14\n" in src3
    assert src3.index("q4k_rows(") < src3.index("q6k_rows(") < src3.index(f"{gemv_cuda.GEMV3}(")
