"""Random tensor payloads for synthetic GGUF files, in any supported GGML type.

Block types are filled with random bytes (vectorized, ~1 GB/s), then every fp16 scale field is
overwritten with a finite, modest value chosen so the dequantized weights have roughly the requested
standard deviation. "min" fields (Q4_1/Q5_1 `m`, K-quant `dmin`) are tied to the block's scale so the
weights are centred near zero.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

Q = GGMLQuantizationType

# qtype -> [(byte offset of an fp16 field inside a block, factor)]; field value = d * factor where d is the
# block's scale. factor 1.0 is the scale itself; the others are mins that centre the block at zero.
SCALE_FIELDS: dict[GGMLQuantizationType, list[tuple[int, float]]] = {
    Q.Q4_0: [(0, 1.0)],
    Q.Q4_1: [(0, 1.0), (2, -7.5)],  # w = d*q + m, q in 0..15
    Q.Q5_0: [(0, 1.0)],
    Q.Q5_1: [(0, 1.0), (2, -15.5)],  # w = d*q + m, q in 0..31
    Q.Q8_0: [(0, 1.0)],
    Q.Q2_K: [(80, 1.0), (82, 1.5)],  # w = d*sc*q - dmin*m, q in 0..3
    Q.Q3_K: [(108, 1.0)],
    Q.Q4_K: [(0, 1.0), (2, 7.5)],  # w = d*sc*q - dmin*m, q in 0..15
    Q.Q5_K: [(0, 1.0), (2, 15.5)],  # q in 0..31
    Q.Q6_K: [(208, 1.0)],
}
FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)


def row_bytes(qtype: GGMLQuantizationType, row_len: int) -> int:
    """Bytes of one row of `row_len` elements; raises ValueError when the row is not whole blocks."""
    block, size = GGML_QUANT_SIZES[qtype]
    if row_len % block:
        raise ValueError(f"{qtype.name} needs rows that are multiples of {block}, got {row_len}")
    return row_len // block * size


def _fill_scales(blocks: np.ndarray, qtype: GGMLQuantizationType, d: np.ndarray) -> None:
    """blocks: uint8 [n_blocks, type_size] in place; d: float32 [n_blocks] block scales."""
    for offset, factor in SCALE_FIELDS[qtype]:
        field = (d * np.float32(factor)).astype(np.float16).view(np.uint8).reshape(-1, 2)
        blocks[:, offset : offset + 2] = field


@cache
def _unit_std(qtype: GGMLQuantizationType) -> float:
    """Std of dequantized random blocks whose scale d is exactly 1 (measured once per type)."""
    rng = np.random.default_rng(1234)
    _, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(512, size), dtype=np.uint8)
    _fill_scales(blocks, qtype, np.ones(512, np.float32))
    return float(quants.dequantize(blocks, qtype).std())


def random_block_rows(
    qtype: GGMLQuantizationType, rows: int, row_len: int, rng: np.random.Generator, std: float
) -> np.ndarray:
    """Random quantized rows: uint8 [rows, row_bytes]. Scales vary +-50% per block around the target."""
    if qtype not in SCALE_FIELDS:
        raise ValueError(f"cannot synthesize tensors of type {qtype.name}")
    nbytes = row_bytes(qtype, row_len)
    _, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=rows * nbytes, dtype=np.uint8)
    blocks = data.reshape(-1, size)
    base = std / _unit_std(qtype)
    d = rng.uniform(0.5 * base, 1.5 * base, size=blocks.shape[0]).astype(np.float32)
    _fill_scales(blocks, qtype, d)
    return data.reshape(rows, nbytes)


def random_tensor(
    qtype: GGMLQuantizationType, shape: tuple[int, ...], rng: np.random.Generator, std: float,
    mean: float = 0.0,
) -> np.ndarray:
    """Payload for GGUFWriter: float32/float16 arrays of `shape` (torch order) for F32/F16, uint8 rows
    [prod(shape[:-1]), row_bytes] for BF16 and block types (write them with raw_dtype=qtype)."""
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    if qtype in FLOAT_TYPES:
        x = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
        if qtype == Q.F32:
            return x
        if qtype == Q.F16:
            return x.astype(np.float16)
        # BF16: keep the top 16 bits (truncation; values are random anyway)
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, -1)
    if mean != 0.0:
        raise ValueError("only float tensors can have a non-zero mean")
    if qtype == Q.MXFP4:
        return random_mxfp4_rows(rows, shape[-1], rng, std)
    return _tiled(qtype, rows, shape[-1], rng, std)


TILE_BYTES = 4 << 20  # above: one random tile repeated (caches go by address, not content: same speed)


def _tiled(qtype: GGMLQuantizationType, rows: int, row_len: int, rng: np.random.Generator,
           std: float) -> np.ndarray:
    """random_block_rows, except that a tensor over TILE_BYTES repeats one random tile of whole rows:
    drawing random bytes runs at ~0.1-1 GB/s, so a 47 GB file (qwen2.5-72b) would take minutes; the
    copy runs at memory speed. Smaller tensors (the test models') get exactly random_block_rows'."""
    nbytes = row_bytes(qtype, row_len)
    tile_rows = max(1, TILE_BYTES // nbytes)
    if rows <= tile_rows:
        return random_block_rows(qtype, rows, row_len, rng, std)
    tile = random_block_rows(qtype, tile_rows, row_len, rng, std)
    return np.resize(tile, (rows, nbytes))


MXFP4_CODE_STD = float(np.sqrt(np.mean(np.square(quants.MXFP4.kvalues))))  # ~5.85: random codes, scale 1


def random_mxfp4_rows(rows: int, row_len: int, rng: np.random.Generator, std: float) -> np.ndarray:
    """Random MXFP4 rows: uint8 [rows, row_bytes]; random 4-bit codes, and per block an E8M0 exponent
    within one power of two of the one that gives `std` (scale 2 ** (e - 128))."""
    nbytes = row_bytes(Q.MXFP4, row_len)
    data = rng.integers(0, 256, size=(rows * nbytes // 17, 17), dtype=np.uint8)
    e = 128 + round(float(np.log2(std / MXFP4_CODE_STD)))
    data[:, 0] = np.clip(e + rng.integers(-1, 2, size=data.shape[0]), 1, 254)
    return data.reshape(rows, nbytes)
