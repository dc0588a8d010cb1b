"""K-quants Q2_K..Q6_K: 256-element super-blocks of 16 or 8 sub-blocks, each with its own small scale.

Byte layouts (llama.cpp block_qN_K), offsets in bytes:
  Q2_K  84: scales[16] (lo 4 bits scale, hi 4 bits min) | qs[64] 2-bit | d f16 @80 | dmin f16 @82
  Q3_K 110: hmask[32] | qs[64] 2-bit | scales[12] 6-bit signed (-32) | d f16 @108
  Q4_K 144: d f16 @0 | dmin f16 @2 | scales[12] 6-bit scale+min x8 | qs[128] 4-bit
  Q5_K 176: d @0 | dmin @2 | scales[12] | qh[32] | qs[128]
  Q6_K 210: ql[128] | qh[64] | scales[16] int8 | d f16 @208
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.registry import f16, register, shifts


def _crumbs(qs: torch.Tensor, groups: int, width: int) -> torch.Tensor:
    """2-bit fields: qs uint8 [n, groups*width] -> [n, groups, 4, width]; bits 2k..2k+1 of each byte -> k."""
    n = qs.shape[0]
    sh = shifts([0, 2, 4, 6], (1, 1, 4, 1), qs.device)
    return (qs.reshape(n, groups, 1, width) >> sh) & 3


def _bits(qh: torch.Tensor, width: int = 32) -> torch.Tensor:
    """1-bit fields: qh uint8 [n, width] -> [n, 8, width]; bit k of each byte -> row k."""
    n = qh.shape[0]
    sh = shifts(list(range(8)), (1, 8, 1), qh.device)
    return (qh.reshape(n, 1, width) >> sh) & 1


@register(Q.Q2_K)
def _q2_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    scales = blocks[:, 0:16]
    dl = (f16(blocks, 80) * (scales & 0x0F).float()).reshape(n, 16, 1)
    ml = (f16(blocks, 82) * (scales >> 4).float()).reshape(n, 16, 1)
    q = _crumbs(blocks[:, 16:80], 2, 32).reshape(n, 16, 16).float()
    return (dl * q - ml).reshape(n, 256)


@register(Q.Q3_K)
def _q3_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    sc = blocks[:, 96:108]
    lo = (sc[:, :8].reshape(n, 1, 8) >> shifts([0, 4], (1, 2, 1), blocks.device)).reshape(n, 16)
    hi = (sc[:, 8:].reshape(n, 1, 4) >> shifts([0, 2, 4, 6], (1, 4, 1), blocks.device)).reshape(n, 16)
    scale = ((lo & 0x0F) | ((hi & 0x03) << 4)).to(torch.int16) - 32
    dl = (f16(blocks, 108) * scale.float()).reshape(n, 16, 1)
    ql = _crumbs(blocks[:, 32:96], 2, 32).reshape(n, 16, 16).to(torch.int16)
    qh = (_bits(blocks[:, 0:32]).reshape(n, 16, 16) ^ 1).to(torch.int16)  # bit set -> no offset
    return (dl * (ql - (qh << 2)).float()).reshape(n, 256)


def _scale_min_k4(sc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K packed 6-bit scales and mins: uint8 [n, 12] -> two uint8 [n, 8]."""
    d, m, md = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
    scale = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mins = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return scale, mins


def _k4_affine(blocks: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """w = d*scale*q - dmin*min per 32-element sub-block; q float [n, 8, 32]."""
    n = blocks.shape[0]
    scale, mins = _scale_min_k4(blocks[:, 4:16])
    d = (f16(blocks, 0) * scale.float()).reshape(n, 8, 1)
    dm = (f16(blocks, 2) * mins.float()).reshape(n, 8, 1)
    return (d * q - dm).reshape(n, 256)


def _nibble_pairs(qs: torch.Tensor, chunk: int) -> torch.Tensor:
    """4-bit fields in chunks of `chunk` bytes: [n, k*chunk] -> [n, k, 2, chunk] (low, then high)."""
    n = qs.shape[0]
    return (qs.reshape(n, -1, 1, chunk) >> shifts([0, 4], (1, 1, 2, 1), qs.device)) & 0x0F


@register(Q.Q4_K)
def _q4_k(blocks: torch.Tensor) -> torch.Tensor:
    q = _nibble_pairs(blocks[:, 16:144], 32).reshape(-1, 8, 32).float()
    return _k4_affine(blocks, q)


@register(Q.Q5_K)
def _q5_k(blocks: torch.Tensor) -> torch.Tensor:
    ql = _nibble_pairs(blocks[:, 48:176], 32).reshape(-1, 8, 32)
    qh = _bits(blocks[:, 16:48])  # [n, 8, 32]
    return _k4_affine(blocks, (ql | (qh << 4)).float())


@register(Q.Q6_K)
def _q6_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    scales = blocks[:, 192:208].contiguous().view(torch.int8).float()
    d = (f16(blocks, 208) * scales).reshape(n, 16, 1)
    ql = _nibble_pairs(blocks[:, 0:128], 64).reshape(n, 8, 32)
    qh = _crumbs(blocks[:, 128:192], 2, 32).reshape(n, 8, 32)
    q = ((ql | (qh << 4)).to(torch.int16) - 32).reshape(n, 16, 16).float()
    return (d * q).reshape(n, 256)
