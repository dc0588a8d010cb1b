"""The on-device layout of Q6_K weights (issue 16): "gguf" (the file's 210-byte blocks) or "split"
(kernels/layout.split_q6_k: 16-byte-aligned blocks, the d's apart). "auto", the default, splits the Q6_K
weights that every kernel the fused decode step may hand them to reads split
(orcd.runner.fused_decode.split_readers) on CUDA with raw weights kept, and leaves the rest "gguf".

The split layout is read by the single-GPU int8 decode kernels (gemv_i8, gemv3_i8 through
DecodeProducts), the float GEMVs, the tensor-core batched kernels (batched_linear, batched_qkv,
batched_fused) and the Triton dequantize (QuantLinear.forward: kernels/q6k_split.split_linear,
fused_linear's routing), each with the GGUF blocks' results bit for bit; anything else that reads raw
Q6_K (the float norm-fused q/k/v GEMV) refuses a split weight by name. It is refused here where no path
reads it: off CUDA, weights not kept quantized, blocks the fused decode step does not run (gemma3,
qwen3, gpt-oss, gpt2). The tied embedding's table stays "gguf" (an embedding gathers rows).
Tensor parallelism (issue 21) slices GGUF rows and blocks, so its ranks split after slicing:
orcd.distributed.driver.load_sharded(q6k_layout="auto") converts, with split_q6k below, the rank's Q6_K
weights that its TPFusedDecoder reads split (orcd.distributed.fused_tp.split_readers); "split" is
refused there (the float GEMVs of the TP step read GGUF blocks only), and slicing a split weight is
refused (orcd.distributed.layers).
The two layouts' kernels sum in different register orders (Triton lays the tiles out by how they are
loaded), so a product can differ by float32 rounding, and greedy tokens of a random-weight model can part
after some steps (bench/results/q6k_split_step_h100.md): both sum the same float32 terms.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType

from orcd.errors import LoadOptionError
from orcd.quant.linear import LAYOUTS, QuantEmbedding, QuantLinear
from orcd.runner.fused_decode import split_readers

CHOICES = ("auto", *LAYOUTS)


def check_q6k_layout(layout: str, device: torch.device, keep_quantized: bool) -> str:
    """LoadOptionError (a ValueError) before the load where `layout` cannot apply on this device / with
    these weights; else the layout to apply ("auto" stays "auto" only on CUDA with raw weights kept, else
    "gguf")."""
    if layout not in CHOICES:
        raise LoadOptionError(f"q6k_layout {layout!r}: one of {CHOICES}")
    if layout == "auto":
        return "auto" if device.type == "cuda" and keep_quantized else "gguf"
    if layout == "split" and device.type != "cuda":
        raise LoadOptionError(f"q6k_layout='split' is for CUDA (its kernels are Triton's), not {device.type}")
    if layout == "split" and not keep_quantized:
        raise LoadOptionError("q6k_layout='split' needs keep_quantized (raw Q6_K blocks on the device)")
    return layout


def apply_q6k_layout(model: torch.nn.Module, layout: str) -> int:
    """Convert the model's raw Q6_K QuantLinears to `layout` in place ("auto": those split_readers names);
    returns how many were converted."""
    if layout == "gguf":
        return 0
    if layout == "split" and not getattr(model, "fused_decode", True):
        raise LoadOptionError(f"q6k_layout='split': {model.cfg.arch} blocks run no decode step that reads it")
    return split_q6k(model, None if layout == "split" else split_readers(model))


def split_q6k(model: torch.nn.Module, chosen: list | None) -> int:
    """Convert to the split layout, in place, the model's raw GGUF-layout Q6_K QuantLinears that are in
    `chosen` (None: all of them), never an embedding's table (a tied head is that table: it stays GGUF
    too); returns how many were converted."""
    tables = {id(m.table) for m in model.modules() if isinstance(m, QuantEmbedding)}
    ids = None if chosen is None else {id(m) for m in chosen}
    n = 0
    for m in model.modules():
        if (isinstance(m, QuantLinear) and m.raw is not None and m.qtype == GGMLQuantizationType.Q6_K
                and m.layout == "gguf" and id(m) not in tables and (ids is None or id(m) in ids)):
            m.to_split()
            n += 1
    return n
