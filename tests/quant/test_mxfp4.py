"""MXFP4 (type 39) dequantization is bit-exact against gguf.quants.dequantize, every exponent included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from orcd.quant import dequantize, dequantize_to, get_format

Q = GGMLQuantizationType
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_mxfp4(rows: int, row_len: int, seed: int) -> np.ndarray:
    """uint8 [rows, row_bytes]: random codes, and every E8M0 exponent 0..255 appears."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows * row_len // 32, 17), dtype=np.uint8)
    n = min(256, raw.shape[0])
    raw[:n, 0] = np.arange(n, dtype=np.uint8)  # subnormal (e < 2) up to overflowing (12 * 2**127 = inf)
    return raw.reshape(rows, -1)


def test_format() -> None:
    fmt = get_format(Q.MXFP4)
    assert (fmt.block_size, fmt.type_size, fmt.row_bytes(2880)) == (32, 17, 1530)


@pytest.mark.parametrize("device", DEVICES)
def test_bit_exact_against_gguf(device: str) -> None:
    rows, row_len = 40, 256  # 320 blocks
    raw = random_mxfp4(rows, row_len, seed=39)
    with np.errstate(over="ignore"):  # e = 255: 12 * 2**127 is inf in both
        ref = np.asarray(quants.dequantize(raw, Q.MXFP4), dtype=np.float32).reshape(rows, row_len)
    got = dequantize(torch.from_numpy(raw).to(device), Q.MXFP4, (rows, row_len))
    assert got.dtype == torch.float32 and got.device.type == device
    got = got.cpu().numpy()
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))  # bit patterns: -0.0, inf, subnormals


def test_quantized_values_round_trip() -> None:
    """gguf's quantizer output dequantizes to the same numbers here (the path synth files take)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 64), dtype=np.float32)
    raw = quants.quantize(w, Q.MXFP4)
    ref = quants.dequantize(raw, Q.MXFP4)
    got = dequantize(torch.from_numpy(raw), Q.MXFP4, (8, 64))
    assert torch.equal(got, torch.from_numpy(ref))
    assert torch.equal(dequantize_to(torch.from_numpy(raw), Q.MXFP4, (8, 64), torch.bfloat16),
                       got.to(torch.bfloat16))


def test_three_d_expert_tensor() -> None:
    """An [experts, rows, cols] expert tensor dequantizes expert by expert the same as whole."""
    raw = random_mxfp4(3 * 4, 64, seed=1)
    whole = dequantize(torch.from_numpy(raw), Q.MXFP4, (3, 4, 64))
    one = dequantize(torch.from_numpy(raw.reshape(3, 4, -1)[1]), Q.MXFP4, (4, 64))
    assert torch.equal(whole[1], one)
