"""QuantLinear / QuantEmbedding agree with the numpy reference, dense or kept quantized."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from orcd.errors import GGUFError, UnsupportedQuantTypeError
from orcd.gguf.reader import GGUFTensor
from orcd.gguf.synth_blocks import random_tensor
from orcd.quant import QuantEmbedding, QuantLinear

Q = GGMLQuantizationType


def gguf_tensor(name: str, qtype: Q, shape: tuple[int, ...], seed: int = 0) -> GGUFTensor:
    data = random_tensor(qtype, shape, np.random.default_rng(seed), 0.05)
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    return GGUFTensor(name, qtype, shape, np.ascontiguousarray(data).view(np.uint8).reshape(rows, -1))


def reference(t: GGUFTensor) -> torch.Tensor:
    return torch.from_numpy(np.asarray(quants.dequantize(t.data, t.qtype), np.float32).reshape(t.shape))


@pytest.mark.parametrize("keep", [False, True], ids=["dense", "kept"])
@pytest.mark.parametrize("qtype", [Q.F16, Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_linear_matches_reference(qtype: Q, keep: bool) -> None:
    w = gguf_tensor("w", qtype, (48, 256))
    b = gguf_tensor("b", Q.F32, (48,), seed=1)
    lin = QuantLinear.from_gguf(w, b, "cpu", torch.float32, keep_quantized=keep)
    assert (lin.raw is not None) == (keep and qtype != Q.F16)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(0))
    want = x @ reference(w).T + reference(b)
    torch.testing.assert_close(lin(x), want, rtol=1e-5, atol=1e-5)
    assert lin(x.reshape(1, 5, 256)).shape == (1, 5, 48)


def test_linear_dtype_and_kept_bytes() -> None:
    w = gguf_tensor("w", Q.Q4_K, (64, 512))
    lin = QuantLinear.from_gguf(w, None, "cpu", torch.bfloat16, keep_quantized=True)
    assert lin.raw.dtype == torch.uint8 and lin.raw.numel() == w.data.nbytes  # no dense copy held
    assert lin.weight is None
    y = lin(torch.randn(3, 512))
    assert y.dtype == torch.bfloat16 and y.shape == (3, 64)


@pytest.mark.parametrize("keep", [False, True], ids=["dense", "kept"])
def test_embedding_rows_and_tied_head(keep: bool) -> None:
    w = gguf_tensor("token_embd.weight", Q.Q8_0, (100, 64))
    emb = QuantEmbedding.from_gguf(w, "cpu", torch.float32, keep_quantized=keep)
    ids = torch.tensor([3, 0, 99, 3])
    assert torch.equal(emb(ids), reference(w)[ids])
    head = emb.as_linear()
    buf = head.raw if keep else head.weight
    assert buf is (emb.table.raw if keep else emb.table.weight)  # one buffer, not a copy
    h = torch.randn(2, 64)
    torch.testing.assert_close(head(h), h @ reference(w).T, rtol=1e-5, atol=1e-5)


def test_unsupported_weight_type_is_named() -> None:
    w = GGUFTensor("blk.0.ffn_up.weight", Q.IQ2_XXS, (8, 256), np.zeros((8, 66), np.uint8))
    with pytest.raises(UnsupportedQuantTypeError, match="IQ2_XXS"):
        QuantLinear.from_gguf(w, None, "cpu", torch.float32, keep_quantized=False)


def test_bad_bias_shape() -> None:
    w = gguf_tensor("w", Q.Q8_0, (8, 64))
    with pytest.raises(GGUFError, match="bias"):
        QuantLinear.from_gguf(w, gguf_tensor("b", Q.F32, (9,)), "cpu", torch.float32, keep_quantized=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_kept_linear_on_cuda(qtype: Q) -> None:
    w = gguf_tensor("w", qtype, (256, 512))
    lin = QuantLinear.from_gguf(w, None, "cuda", torch.float32, keep_quantized=True)
    x = torch.randn(4, 512)
    torch.testing.assert_close(lin(x.cuda()).cpu(), x @ reference(w).T, rtol=2e-3, atol=2e-3)
