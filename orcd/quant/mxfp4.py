"""MXFP4 (GGML type 39, the gpt-oss expert weights): OCP microscaling FP4.

A block is 17 bytes for 32 elements: byte 0 is an E8M0 shared exponent e, bytes 1..16 hold 4-bit E2M1
codes, element j < 16 in the low nibble of byte 1 + j, element 16 + j in the high nibble. Like ggml, the
code table holds the E2M1 values doubled (integers -12..12) and the scale is halved: 2 ** (e - 128).
"""

from __future__ import annotations

import functools

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.registry import register

# E2M1 values * 2, indexed by the 4-bit code (bit 3 = sign)
KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


@functools.lru_cache(maxsize=16)
def kvalues(device: str) -> torch.Tensor:
    """The code table as float32 [16] on `device`, made once per device (no copy inside graph capture)."""
    return torch.tensor(KVALUES, dtype=torch.float32, device=device)


def e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """uint8 exponents [n, 1] -> float32 2 ** (e - 128), as ggml_e8m0_to_fp32_half (e < 2: subnormal)."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, torch.full_like(e, 0x00200000) << e, (e - 1) << 23)
    return bits.view(torch.float32)


@register(Q.MXFP4)
def _mxfp4(blocks: torch.Tensor) -> torch.Tensor:
    qs = blocks[:, 1:17]
    codes = torch.cat([qs & 0x0F, qs >> 4], dim=1).long()  # [n, 32]: low nibbles then high nibbles
    return e8m0_half(blocks[:, :1]) * kvalues(str(blocks.device))[codes]


def split_blocks_(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewrite MXFP4 rows in place, in the same bytes: raw uint8 [..., n_blocks * 17] (contiguous) becomes
    every block's exponent first, then every block's 16 code bytes -> (scales uint8 [..., n_blocks],
    codes uint8 [..., n_blocks * 16]), views of raw's storage. The codes of a row are then contiguous and
    16-byte aligned wherever raw is, so kernels read them in vector loads (17-byte blocks are not)."""
    lead = raw.shape[:-1]
    nb = raw.shape[-1] // 17
    flat = raw.reshape(-1)
    blocks = flat.view(-1, 17)
    n = blocks.shape[0]
    scales, codes = blocks[:, 0].clone(), blocks[:, 1:].clone()  # one tensor's worth of scratch
    flat[:n] = scales
    flat[n:] = codes.view(-1)
    return flat[:n].view(*lead, nb), flat[n:].view(*lead, nb * 16)
