"""The on-device layout of Q6_K weights (issue 16): "gguf" (the file's 210-byte blocks, the default) or
"split" (kernels/layout.split_q6_k: 16-byte-aligned blocks, the d's apart; opt-in).

The split layout is read by the single-GPU int8 decode kernels (gemv_i8, gemv3_i8 through
DecodeProducts), the float GEMVs, the tensor-core batched kernels (batched_linear, batched_qkv,
batched_fused) and the Triton dequantize (QuantLinear.forward: kernels/q6k_split.split_linear,
fused_linear's routing), each with the GGUF blocks' results bit for bit; anything else that reads raw
Q6_K (the float norm-fused q/k/v GEMV) refuses a split weight by name. It is refused here where no path
reads it: off CUDA, weights not kept quantized, blocks the fused decode step does not run (gemma3,
qwen3, gpt-oss, gpt2). The tied embedding's table stays "gguf" (an embedding gathers rows). Tensor
parallelism slices rows after the load: orcd.distributed refuses split weights.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType

from orcd.quant.linear import LAYOUTS, QuantEmbedding, QuantLinear


def check_q6k_layout(layout: str, device: torch.device, keep_quantized: bool) -> None:
    """ValueError before the load where `layout` cannot apply on this device / with these weights."""
    if layout not in LAYOUTS:
        raise ValueError(f"q6k_layout {layout!r}: one of {LAYOUTS}")
    if layout == "split" and device.type != "cuda":
        raise ValueError(f"q6k_layout='split' is for CUDA (its kernels are Triton's), not {device.type}")
    if layout == "split" and not keep_quantized:
        raise ValueError("q6k_layout='split' needs keep_quantized (raw Q6_K blocks on the device)")


def apply_q6k_layout(model: torch.nn.Module, layout: str) -> int:
    """Convert the model's raw Q6_K QuantLinears to `layout` in place; returns how many were converted."""
    if layout == "gguf":
        return 0
    if not getattr(model, "fused_decode", True):
        raise ValueError(f"q6k_layout='split': {model.cfg.arch} blocks run no decode step that reads it")
    tables = {id(m.table) for m in model.modules() if isinstance(m, QuantEmbedding)}
    n = 0
    for m in model.modules():
        if (isinstance(m, QuantLinear) and m.raw is not None and m.qtype == GGMLQuantizationType.Q6_K
                and id(m) not in tables):
            m.to_split()
            n += 1
    return n
