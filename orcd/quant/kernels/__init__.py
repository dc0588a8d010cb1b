"""Triton kernels over raw GGUF blocks (CUDA; also run on the CPU under TRITON_INTERPRET=1 for tests).

`get_fused_linear(qtype, device)` -> callable `(x [N, in], raw uint8 [out, row_bytes], out_features,
in_features) -> [N, out]` in x.dtype, or None where no kernel applies (CPU device, no triton, or a type
without a kernel). Callers fall back to dequantize-then-matmul on None.
"""

from __future__ import annotations

import functools
import re

import torch
from gguf import GGMLQuantizationType

from orcd import env
from orcd.errors import LoadOptionError

SUPPORTED_QTYPES = frozenset({
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
})


# the oldest Triton that compiles every kernel here for sm_90 (tests/kernels_compile fail on 3.4)
MIN_TRITON = (3, 5)


def triton_too_old(version: str) -> bool:
    """Whether a Triton version string ("3.4.0", "3.6.0+git1a2b") is older than MIN_TRITON."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is None or (int(m.group(1)), int(m.group(2))) < MIN_TRITON


def require_kernel_triton(device: torch.device | str) -> None:
    """Before loading onto CUDA: LoadOptionError when the installed Triton cannot compile orcd's kernels
    (they would fail inside the first request instead). No Triton at all: the torch paths run."""
    if torch.device(device).type != "cuda" or not triton_available():
        return
    import triton

    if triton_too_old(triton.__version__):
        need = ".".join(map(str, MIN_TRITON))
        raise LoadOptionError(
            f"orcd's CUDA kernels need Triton >= {need}, this environment has {triton.__version__} "
            f"(torch {torch.__version__}): pip install 'triton>={need}' (torch >= 2.9 brings it)")


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
