"""y = x @ W.T (+ bias) for a Q6_K weight in the split layout (layout.split_q6_k; q6k_layout='split'), any
rows: fused_linear's routing for a Q6_K weight, each kernel reading the split layout, so the result
equals fused_linear's on the GGUF blocks bit for bit (tests/quant/test_q6k_split_mm.py) except where
mmq_cuda takes it (reads the split layout only):
  N <= GEMV_MAX_N             the float GEMV (launch_gemv, gemv_plan's shape), split
  mmq_cuda_routed()           mmq_cuda.py's CUDA-C kernel (N <= 64 of 16-bit x: mmq_cuda.ROUTED has Q6_K
                              since session 20; its own rounding)
  N <= MM_MAX_N and routed()  batched_linear (tensor cores), split (mmq.py takes no Q6_K: MMQ_ROUTE)
  otherwise                   the split dequantize to x.dtype, then one cuBLAS GEMM
QuantLinear.forward's kernel for such a weight; the norm-fused decode step's products call the int8
GEMVs (gemv_i8 / gemv3_i8) with split=True directly."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.batched_linear import batched_linear, routed
from orcd.quant.kernels.dequant_kernel import dequantize_raw
from orcd.quant.kernels.fused_linear import GEMV_MAX_N, MM_MAX_N, gemv_plan, launch_gemv
from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear, mmq_cuda_routed


def split_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] (bf16/fp16/fp32), raw: split Q6_K uint8 [out, row_bytes] -> [N, out] in x.dtype (+ bias
    [out]): fused_linear(x, unsplit(raw), out, in, Q6_K, bias), bit for bit."""
    qt = int(Q.Q6_K)
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"x must be [N, {in_features}], got {tuple(x.shape)}")
    if raw.dtype != torch.uint8 or raw.numel() != out_features * row_bytes(qt, in_features):
        raise ValueError(f"raw must be uint8 [{out_features}, {row_bytes(qt, in_features)}]")
    x = x.contiguous()
    n = x.shape[0]
    if n <= GEMV_MAX_N:
        y = torch.empty((n, out_features), dtype=x.dtype, device=x.device)
        if n:
            g, bo, warps, splits = gemv_plan(qt, out_features, in_features)
            launch_gemv(x, raw, y, qt, out_features, in_features, g, bo, warps, splits, bias, split=True)
        return y
    if mmq_cuda_routed(qt, in_features, x, raw, split=True):  # 5..16 rows: CUDA C, tensor cores
        return mmq_cuda_linear(x, raw, out_features, in_features, bias, qtype=qt)
    if n <= MM_MAX_N and routed(qt, out_features, in_features):
        return batched_linear(x, raw, out_features, in_features, qt, bias, split=True)
    w = dequantize_raw(raw, qt, out_features, in_features, x.dtype, split=True)
    return torch.addmm(bias, x, w.t()) if bias is not None else torch.matmul(x, w.t())
