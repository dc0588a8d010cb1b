"""The Q6_K split layout (issue 16): the conversion and its inverse, and every kernel that reads it
against the same kernel on GGUF's blocks (interp_q6k_split.py under the Triton interpreter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T

from orcd.quant import dequantize
from orcd.quant.kernels.layout import q6k_tail, split_q6_k, unsplit_q6_k
from tests.gpu.interp_run import interpreter_only, run_under_interpreter


def _raw(out: int, nb: int, seed: int) -> torch.Tensor:
    """uint8 [out, nb * 210]: random bytes, the d's finite fp16."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(out, nb, 210), dtype=np.uint8)
    d = (rng.standard_normal((out, nb)) * 0.02).astype(np.float16)
    raw[:, :, 208:] = d.view(np.uint8).reshape(out, nb, 2)
    return torch.from_numpy(raw.reshape(out, -1))


def test_split_places_blocks_and_ds():
    raw = _raw(5, 3, 0)
    sp = split_q6_k(raw)
    assert sp.shape == raw.shape and sp.dtype == torch.uint8
    flat, blocks = sp.reshape(-1), raw.view(5, 3, 210)
    for r in range(5):
        for b in range(3):
            i = r * 3 + b
            assert torch.equal(flat[i * 208:(i + 1) * 208], blocks[r, b, :208])
            assert torch.equal(flat[5 * 3 * 208 + 2 * i:5 * 3 * 208 + 2 * i + 2], blocks[r, b, 208:])
    assert torch.equal(q6k_tail(sp), blocks[:, :, 208:].reshape(-1, 2).contiguous().view(torch.float16)[:, 0])


@pytest.mark.parametrize("out, nb", [(1, 1), (7, 3), (16, 14)])
def test_round_trip(out, nb):
    raw = _raw(out, nb, out * nb)
    sp = split_q6_k(raw)
    assert not torch.equal(sp, raw) or out * nb == 1
    assert torch.equal(unsplit_q6_k(sp), raw)
    want = dequantize(raw, T.Q6_K, (out, nb * 256))
    assert torch.equal(dequantize(unsplit_q6_k(sp), T.Q6_K, (out, nb * 256)), want)


@interpreter_only
def test_kernels_split_equal_gguf():
    rows = run_under_interpreter(Path(__file__).with_name("interp_q6k_split.py"), 300)
    assert [r[0] for r in rows] == ["gemv_i8_m1", "gemv_i8_m3", "gemv_i8_m9", "gemv3_i8_ggs", "gemv3_i8_gsg",
                                    "dequantize_raw", "split_linear_f32_m70"]
    for name, err, _ in rows:
        assert float(err) == 0.0, name
