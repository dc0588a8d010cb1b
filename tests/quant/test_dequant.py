"""Torch dequantizers are bit-exact against gguf.quants.dequantize (the numpy reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from orcd.errors import GGUFError, UnsupportedQuantTypeError
from orcd.gguf.synth_blocks import SCALE_FIELDS
from orcd.quant import dequantize, dequantize_to, supported_qtypes

Q = GGMLQuantizationType
BLOCK_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
ALL_TYPES = [Q.F32, Q.F16, Q.BF16, *BLOCK_TYPES]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_finite_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random fp16 bit patterns, any finite value (subnormals and +-65504 included)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bad = (bits & 0x7C00) == 0x7C00  # inf / nan exponent
    bits[bad] &= 0xBBFF  # clear one exponent bit: finite
    return bits.view(np.float16)


def random_raw(qtype: Q, rows: int, row_len: int, seed: int) -> np.ndarray:
    """uint8 [rows, row_bytes]: random bytes, fp16 scale fields random but finite, floats finite."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * row_len // block, size), dtype=np.uint8)
    if qtype == Q.F32:
        raw = rng.standard_normal(rows * row_len, dtype=np.float32).view(np.uint8).reshape(-1, 4)
    elif qtype in (Q.F16, Q.BF16):
        src = random_finite_f16(rng, rows * row_len)
        raw = src.view(np.uint8).reshape(-1, 2).copy()
        if qtype == Q.BF16:  # the bf16 exponent field is bits 7..14; keep it finite
            hi = raw[:, 1]
            raw[:, 1] = np.where((hi & 0x7F) == 0x7F, hi & 0xFE, hi)
    for offset, _ in SCALE_FIELDS.get(qtype, []):
        raw[:, offset : offset + 2] = random_finite_f16(rng, raw.shape[0]).view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_bit_exact_against_gguf(qtype: Q, device: str) -> None:
    rows, row_len = 48, 512
    raw = random_raw(qtype, rows, row_len, seed=int(qtype))
    ref = np.asarray(quants.dequantize(raw, qtype), dtype=np.float32).reshape(rows, row_len)
    assert np.isfinite(ref).all()
    got = dequantize(torch.from_numpy(raw).to(device), qtype, (rows, row_len))
    assert got.dtype == torch.float32 and got.device.type == device
    assert torch.equal(got.cpu(), torch.from_numpy(ref))


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.F16], ids=lambda q: q.name)
def test_chunked_cast_matches_full(qtype: Q, monkeypatch: pytest.MonkeyPatch) -> None:
    import orcd.quant.dequant as dq

    raw = torch.from_numpy(random_raw(qtype, 16, 256, seed=3))
    full = dequantize(raw, qtype, (16, 256))
    monkeypatch.setattr(dq, "CHUNK_ELEMENTS", 300)  # several chunks, last one partial
    assert torch.equal(dequantize_to(raw, qtype, (16, 256), torch.float32), full)
    assert torch.equal(dequantize_to(raw, qtype, (16, 256), torch.bfloat16), full.to(torch.bfloat16))


def test_every_required_type_is_registered() -> None:
    assert set(ALL_TYPES) <= supported_qtypes()


@pytest.mark.parametrize("qtype", [Q.IQ2_XXS, Q.TQ1_0, 9999], ids=str)
def test_unsupported_type_names_it(qtype) -> None:
    with pytest.raises(UnsupportedQuantTypeError, match="IQ2_XXS|TQ1_0|#9999"):
        dequantize(torch.zeros(66, dtype=torch.uint8), qtype, (256,))


def test_size_mismatch_is_a_gguf_error() -> None:
    with pytest.raises(GGUFError, match="does not hold shape"):
        dequantize(torch.zeros(33, dtype=torch.uint8), Q.Q8_0, (64,))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_dequantize_in_cuda_graph(qtype: Q) -> None:
    """The fallback path of kept-quantized layers runs inside captured decode steps."""
    raw = torch.from_numpy(random_raw(qtype, 8, 256, seed=7)).cuda()
    eager = dequantize(raw, qtype, (8, 256))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dequantize(raw, qtype, (8, 256))  # warm-up outside capture
        with torch.cuda.graph(graph, stream=stream):
            out = dequantize(raw, qtype, (8, 256))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
