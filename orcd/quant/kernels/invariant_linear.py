"""Batch-invariant y = x @ W.T (+ b): one tensor-core GEMM, one tile shape for every number of rows.

Row m of y depends only on row m of x: each program computes a [BM, BN] tile of y over one fixed slice
of K (SPLIT_ITERS steps of BK), accumulating tl.dot partials in fp32; a second kernel adds the slices'
fp32 partials in slice order (split-K gives a one-row decode enough programs). BM, BN, BK, the slices
and the warp count depend only on the weight's type and K, never on M. So a token's output is
bit-identical whether it is alone (decode, M = 1) or one of 512 rows of a prefill, which the GEMV
(<= 4 rows) / dequantize + cuBLAS (M-dependent kernels) split of fused_linear.py does not give.
Raw GGUF weights are dequantized tile by tile inside the K loop (tiles.py) and rounded to x's dtype, as
the dequantize-to-bf16 path rounds them; dense weights are read as they are. fp32 uses IEEE products.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import BLOCK_SIZE, TYPE_SIZE, q6k_tail
from orcd.quant.kernels.split_k import reduce_partials
from orcd.quant.kernels.tiles import dequant_tile

DENSE = 0  # "type id" of a dense weight (F32/F16/BF16 [out, in])
# type (DENSE or a GGMLQuantizationType) -> (elements per scale group S, groups per K step G); BK = S * G
K_TILES = MappingProxyType({DENSE: (64, 1), Q.Q8_0: (32, 4), Q.Q5_0: (32, 4), Q.Q4_K: (32, 8),
                            Q.Q6_K: (16, 16)})
# (BM, BN, SPLIT_ITERS) from a sweep on an H200 (all of a 0.5B-shaped Q4_K_M token's products, us):
# (64, 32, 2) 1,705 / 1,908 / 6,142 at M = 1 / 64 / 512; (32, 32, 2) 1,536 / 2,382 / 9,271;
# (64, 64, 2) 1,869 / 2,115 / 7,058; (16, 32, 1) 1,595 / 3,444 / 16,614.
BLOCK_M = 64
BLOCK_N = 32
SPLIT_ITERS = 2  # K steps per split: splits = ceil(K / BK / SPLIT_ITERS) programs share a tile's K range


@triton.jit
def _inv_mm_kernel(x_ptr, w_ptr, w16_ptr, b_ptr, y_ptr, ws_ptr, M, N, K, stride_xm, stride_ym, w_row,
                   QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   SPLIT_ITERS: tl.constexpr, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                   IEEE: tl.constexpr, Q6S: tl.constexpr = False):
    # w_row: elements per weight row (dense) or bytes per weight row (raw GGUF blocks); Q6S: Q6_K in
    # layout.split_q6_k's layout (w16_ptr: the d's).
    # Program (n tile, m tile, split s) sums K steps [s * SPLIT_ITERS, (s + 1) * SPLIT_ITERS) in order;
    # with more than one split it writes fp32 partials ws [splits, M, N] for split_k's reduce.
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mmask = rm < M
    nmask = rn < N
    BK: tl.constexpr = S * G
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    k_lo = split * SPLIT_ITERS * BK
    for k0 in range(k_lo, tl.minimum(k_lo + SPLIT_ITERS * BK, K), BK):
        kk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=mmask[:, None] & (kk[None, :] < K), other=0.0)  # [BM, BK]
        if QT == 0:
            w = tl.load(w_ptr + rn.to(tl.int64)[:, None] * w_row + kk[None, :],
                        mask=nmask[:, None] & (kk[None, :] < K), other=0.0).to(x.dtype)  # [BN, BK]
        else:
            gg = tl.arange(0, G)[None, :, None]
            m3 = nmask[:, None, None] & ((k0 + gg * S) < K)  # whole groups: K is a multiple of the block
            w3 = dequant_tile(w_ptr, w16_ptr, rn.to(tl.int64)[:, None, None] * w_row, m3, k0, QT, G, Q6S)
            w = tl.reshape(w3, [BN, BK]).to(x.dtype)
        if IEEE:
            acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    omask = mmask[:, None] & nmask[None, :]
    if SPLIT:
        ws = ws_ptr + (split * M + rm.to(tl.int64))[:, None] * N + rn[None, :]
        tl.store(ws, acc, mask=omask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=omask)


def invariant_kernel_types() -> frozenset[int]:
    """GGML type ids the kernel reads raw (others: dequantize first, then the dense kernel)."""
    return frozenset(k for k in K_TILES if k != DENSE)


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, qtype: int = DENSE, out_features: int = 0,
                     bias: torch.Tensor | None = None, split: bool = False) -> torch.Tensor:
    """x [M, in] -> [M, out] in x.dtype. weight: dense [out, in] (qtype DENSE) or raw uint8 [out, row_bytes]
    GGUF blocks of type `qtype` (Q8_0, Q5_0, Q4_K, Q6_K) with out_features rows; split: Q6_K in
    layout.split_q6_k's layout (the GGUF blocks' result bit for bit)."""
    qt = int(qtype)
    if split and qt != Q.Q6_K:
        raise ValueError(f"the split layout is Q6_K's (14), not type {qt}")
    if qt not in K_TILES:
        raise ValueError(f"no batch-invariant kernel for GGML type {qt}")
    x = x.contiguous()
    m, k = x.shape
    if qt == DENSE:
        weight = weight.contiguous()
        n, w_row, w16 = weight.shape[0], weight.stride(0), None
        if weight.shape[1] != k:
            raise ValueError(f"weight is {tuple(weight.shape)}, x is {tuple(x.shape)}")
    else:
        n, w_row = out_features, k // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
        if weight.dtype != torch.uint8 or weight.numel() != n * w_row:
            raise ValueError(f"raw must be uint8 [{n}, {w_row}]")
        weight = weight.contiguous()
        w16 = (q6k_tail(weight) if split else weight.view(-1)).view(torch.int16)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    s, g = K_TILES[qt]
    splits = triton.cdiv(triton.cdiv(k, s * g), SPLIT_ITERS)  # a function of K only, never of M
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else None
    grid = (triton.cdiv(n, BLOCK_N), triton.cdiv(m, BLOCK_M), splits)
    _inv_mm_kernel[grid](x, weight, w16, bias, y, ws, m, n, k, x.stride(0), y.stride(0), w_row,
                         QT=qt, S=s, G=g, BM=BLOCK_M, BN=BLOCK_N, SPLIT_ITERS=SPLIT_ITERS, SPLIT=splits > 1,
                         HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, Q6S=split, num_warps=4)
    reduce_partials(ws, bias, y)  # splits > 1: their sum in split order (+ bias)
    return y
