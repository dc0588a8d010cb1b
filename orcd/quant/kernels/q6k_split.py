"""y = x @ W.T for a Q6_K weight in the split layout (layout.split_q6_k; q6k_layout='split'), any rows:
QuantLinear.forward's kernel for such a weight (the decode step's own products call gemv_i8 directly).

Up to MM_ROWS rows of bf16/fp16 x: gemv_i8 (x quantized to int8 per 32, llama.cpp's MMVQ error, NT
rows per program); more rows, or float32 x (kept exact): the split dequantize, then one cuBLAS GEMM."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.dequant_kernel import dequantize_raw
from orcd.quant.kernels.gemv_int8 import gemv_i8
from orcd.quant.kernels.xquant import quantize_x

MM_ROWS = 64  # as fused_linear.MM_MAX_N: above, the dequantized weight's one GEMM


def split_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] -> [N, out] in x.dtype; raw: split Q6_K uint8 [out, row_bytes]; bias [out] or None."""
    if x.shape[0] <= MM_ROWS and x.dtype != torch.float32:
        xq, xs = quantize_x(x.contiguous())
        return gemv_i8(xq, xs, raw, out_features, in_features, Q.Q6_K, bias, dtype=x.dtype, split=True)
    w = dequantize_raw(raw, Q.Q6_K, out_features, in_features, x.dtype, split=True)
    y = torch.matmul(x, w.t())
    return y + bias if bias is not None else y  # as QuantLinear.forward over fused_linear
