"""GGUF block layout of the types the kernels read raw: read-only tables keyed by GGMLQuantizationType."""

from __future__ import annotations

from types import MappingProxyType

from gguf import GGMLQuantizationType as Q

BLOCK_SIZE = MappingProxyType({Q.Q8_0: 32, Q.Q5_0: 32, Q.Q4_K: 256, Q.Q6_K: 256})  # inputs per block
TYPE_SIZE = MappingProxyType({Q.Q8_0: 34, Q.Q5_0: 22, Q.Q4_K: 144, Q.Q6_K: 210})  # bytes per block


def row_bytes(qtype: Q | int, in_features: int) -> int:
    """Bytes of one weight row of `in_features` inputs (a whole number of blocks)."""
    return in_features // BLOCK_SIZE[qtype] * TYPE_SIZE[qtype]
