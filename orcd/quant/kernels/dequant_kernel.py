"""Triton dequantize of raw GGUF blocks to a dense [out, in] matrix (for prefill: then cuBLAS)."""

from __future__ import annotations

from types import MappingProxyType

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import q6k_tail
from orcd.quant.kernels.tiles import dequant_tile

# type -> (elements per scale group S, groups per tile G)
DEQUANT_TILES = MappingProxyType({Q.Q8_0: (32, 8), Q.Q5_0: (32, 8), Q.Q4_K: (32, 8), Q.Q6_K: (16, 16)})


@triton.jit
def _dequant_kernel(p8, p16, w_ptr, OUT, K, row_bytes,
                    QT: tl.constexpr, S: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                    SPLIT: tl.constexpr = False):
    rows = tl.program_id(0) * BO + tl.arange(0, BO)
    k0 = tl.program_id(1) * (G * S)
    gg = tl.arange(0, G)[None, :, None]
    m = (rows < OUT)[:, None, None] & ((k0 + gg * S) < K)
    w = dequant_tile(p8, p16, rows.to(tl.int64)[:, None, None] * row_bytes, m, k0, QT, G, SPLIT)  # [BO, G, S]
    w2 = tl.reshape(w, [BO, G * S])
    kk = k0 + tl.arange(0, G * S)
    ptrs = w_ptr + rows.to(tl.int64)[:, None] * K + kk[None, :]
    tl.store(ptrs, w2.to(w_ptr.dtype.element_ty), mask=(rows[:, None] < OUT) & (kk[None, :] < K))


def dequantize_raw(raw: torch.Tensor, qtype: int, out_features: int, in_features: int,
                   dtype: torch.dtype, out: torch.Tensor | None = None, split: bool = False) -> torch.Tensor:
    """raw uint8 [out, row_bytes] -> [out, in] in dtype (written into `out` when given). split: Q6_K in
    layout.split_q6_k's layout."""
    qt = int(qtype)
    if split and qt != 14:
        raise ValueError(f"the split layout is Q6_K's (14), not type {qt}")
    s, g = DEQUANT_TILES[qt]
    row_bytes = raw.numel() // out_features
    w = out if out is not None else torch.empty((out_features, in_features), dtype=dtype, device=raw.device)
    bo = 16
    grid = (triton.cdiv(out_features, bo), triton.cdiv(in_features, g * s))
    p16 = q6k_tail(raw).view(torch.int16) if split else raw.view(-1).view(torch.int16)
    _dequant_kernel[grid](raw, p16, w, out_features, in_features, row_bytes, QT=qt, S=s, G=g, BO=bo,
                          SPLIT=split, num_warps=4)
    return w
