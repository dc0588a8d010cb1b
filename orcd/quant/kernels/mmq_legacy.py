"""Decode batches over raw Q5_0 and Q8_0 blocks on the tensor cores, in CUDA C (cuda/mmq_legacy_w16.cu).

llama.cpp writes these "legacy" 32-input types where a K-quant's 256-input super-blocks do not divide
the rows: the 72B's ffn_down (29,568 inputs: Q5_0 and Q8_0 in alternate layers, 16.9 of the 45.2 GB a
token reads), gpt-oss's attention and head (Q8_0), the 0.5B's 896-wide products. Before this kernel a
decode batch of 9..64 rows ran them as a dequantize to bf16 plus cuBLAS (Q5_0: ~4.7 bytes moved per
weight of 0.69) or batched_linear (Q8_0).

y[M, N] = x[M, K] @ W[N, K].T for M = 1..64 rows of bf16 or fp16 x, W read once from memory for all rows
in GGUF's own blocks, each weight dequantized to x's type in registers where mma.m16n8k16 takes it, fp32
accumulation, sums in a fixed order (deterministic; not batch-invariant). The pieces it shares with the
Q4_K / Q6_K kernels (NVRTC through torch, the fragments, the warps' reduction) are mmq_cuda.py's.
"""

from __future__ import annotations

import functools

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.mmq_cuda import OUT_KIND, available, check_launch, kernel_source

MAX_ROWS = 64  # 8 token tiles of 8
KERNELS = {Q.Q5_0: ("mmq_q5_0_w16", 6, 22), Q.Q8_0: ("mmq_q8_0_w16", 8, 34)}  # type -> (name, QTYPE, bytes)
# type -> the most rows fused_linear sends here (past GEMV_MAX_N; down_rows keeps Q5_0's 5..8 rows).
# H200, the 72B's down 8192 x 29568 (bench/results/mmq_legacy_s26/): at 16 rows Q5_0 157.6 us against
# 342.7 dequantize + cuBLAS, Q8_0 170.2 against 204.3 batched_linear; at 64 rows every block re-reads x
# from L2 (3.8 MB) and dequantize + cuBLAS wins (350.3 against 408.3 at NW 4, MT 2), so 32 rows.
ROUTED = {Q.Q5_0: 32, Q.Q8_0: 32}


def legacy_source(qtype: Q | int, nw: int, mt: int, tt: int, out_kind: int, has_bias: bool) -> str:
    """The CUDA-C text NVRTC compiles for one type and configuration (tests/kernels_compile too)."""
    name, code, _ = KERNELS[Q(int(qtype))]
    head = f"#define QTYPE {code}\n#define KNAME {name}\n"
    return head + kernel_source("mmq_legacy_w16", nw, mt, tt, out_kind, has_bias)


@functools.cache
def _kernel(qtype: Q, nw: int, mt: int, tt: int, out_kind: int, has_bias: bool, device_index: int):
    with torch.cuda.device(device_index):
        return torch.cuda._compile_kernel(legacy_source(qtype, nw, mt, tt, out_kind, has_bias),
                                          KERNELS[qtype][0])


def default_launch(rows: int, out_features: int) -> tuple[int, int]:
    """(NW warps per block, MT 16-row tiles per warp). Each block reads all of x from L2, so past 16
    rows a block takes more weight rows (fewer blocks, fewer reads of x); small N keeps more blocks."""
    if rows <= 16 or out_features <= 4096:
        return 8, 1
    return 4, 2


def mmq_legacy_routed(qtype: Q | int, x: torch.Tensor, raw: torch.Tensor) -> bool:
    """Whether fused_linear sends this decode batch here: ROUTED's types and rows, 16-bit x, a device
    where the kernels compile (mmq_cuda.available)."""
    most = ROUTED.get(int(qtype), 0)
    return x.shape[0] <= most and x.dtype in OUT_KIND and raw.data_ptr() % 2 == 0 and available(x.device)


def mmq_legacy_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                      qtype: Q | int, bias: torch.Tensor | None = None,
                      launch: tuple[int, int] | None = None) -> torch.Tensor:
    """x [M, in] (bf16/fp16 on CUDA, M <= MAX_ROWS), raw uint8 [out, row_bytes] of Q5_0 or Q8_0 blocks
    -> [M, out] in x.dtype (+ bias [out]). launch: (NW, MT) instead of default_launch's."""
    if int(qtype) not in KERNELS:
        raise ValueError(f"mmq_legacy_linear: Q5_0 or Q8_0, got type {int(qtype)}")
    qt = Q(int(qtype))
    m, k = x.shape
    if k != in_features or k % 32 or not 1 <= m <= MAX_ROWS:
        raise ValueError(f"mmq_legacy_linear: x [1..{MAX_ROWS}, {in_features}] with in % 32 == 0, got "
                         f"{tuple(x.shape)}")
    if x.dtype not in OUT_KIND:
        raise ValueError(f"mmq_legacy_linear: x must be bf16 or fp16, got {x.dtype}")
    nblk = k // 32
    raw = raw.contiguous()
    if raw.dtype != torch.uint8 or raw.numel() != out_features * nblk * KERNELS[qt][2] or raw.data_ptr() % 2:
        raise ValueError(f"raw must be uint8 [{out_features}, {nblk * KERNELS[qt][2]}], 2-byte aligned")
    tt = -(-m // 8)
    nw, mt = launch or default_launch(m, out_features)
    check_launch(nw, mt, tt)
    x = x.contiguous()
    if x.data_ptr() % 8:  # 8-byte x pieces (rows are 64-byte multiples)
        x = x.clone()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    b = bias.float().contiguous() if bias is not None else y
    kern = _kernel(qt, nw, mt, tt, OUT_KIND[x.dtype], bias is not None, x.device.index or 0)
    grid = (-(-out_features // (16 * mt)), 1, 1)
    kern(grid=grid, block=(32 * nw, 1, 1), args=[raw, x, b, y, m, out_features, nblk])
    return y
