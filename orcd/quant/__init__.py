"""GGUF quantized weights: one dequantizer per GGML type, registered by type.

INTERIM (lead): `dequantize` falls back to the gguf package's numpy reference. The gguf/quant owner
replaces it with torch implementations (CPU and CUDA) registered per type, bit-exact to the reference.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from orcd.errors import UnsupportedQuantTypeError


def dequantize(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    """raw: uint8 bytes of a tensor ([rows, row_bytes] or flat) -> float32 tensor of `shape`, same device."""
    try:
        out = quants.dequantize(raw.cpu().numpy().reshape(-1), qtype)
    except NotImplementedError as err:
        raise UnsupportedQuantTypeError(f"quant type {qtype.name} is not supported") from err
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).reshape(shape).to(raw.device)
