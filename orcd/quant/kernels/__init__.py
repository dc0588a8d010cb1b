"""Triton kernels over raw GGUF blocks (CUDA; also run on the CPU under TRITON_INTERPRET=1 for tests).

`get_fused_linear(qtype, device)` -> callable `(x [N, in], raw uint8 [out, row_bytes], out_features,
in_features) -> [N, out]` in x.dtype, or None where no kernel applies (CPU device, no triton, or a type
without a kernel). Callers fall back to dequantize-then-matmul on None.
"""

from __future__ import annotations

import functools

import torch
from gguf import GGMLQuantizationType

from orcd import env

SUPPORTED_QTYPES = frozenset({
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
})


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def _device_ok(device: torch.device | str) -> bool:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available()
    # CPU tensors work only through the Triton interpreter (tests)
    return device.type == "cpu" and env.triton_interpreter()


def get_fused_linear(qtype: GGMLQuantizationType | int, device: torch.device | str):
    """The fused dequant-matmul for `qtype` on `device`, or None."""
    try:
        qtype = GGMLQuantizationType(int(qtype))
    except ValueError:
        return None
    if qtype not in SUPPORTED_QTYPES or not _device_ok(device) or not triton_available():
        return None
    from orcd.quant.kernels.fused_linear import fused_linear

    return functools.partial(fused_linear, qtype=int(qtype))
