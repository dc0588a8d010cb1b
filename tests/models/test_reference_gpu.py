"""The HF reference comparison on CUDA: bf16 logits close, fp32 greedy tokens identical (run on the H100)."""

from __future__ import annotations

import pytest
import torch
from models_helpers import (
    CASES,
    PROMPTS,
    hf_greedy,
    hf_last_logits,
    hf_model,
    orcd_last_logits,
    paged_greedy,
    write_case,
)

from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
N_NEW = 32


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    path = write_case(tmp_path_factory.mktemp(request.param), request.param)
    return path, hf_model(path)


def runner(path, dtype, keep_quantized=True):
    lm = load_model(path, device="cuda", dtype=dtype, keep_quantized=keep_quantized, tokenizer=False)
    assert lm.device.type == "cuda"
    return ModelRunner(lm, num_kv_blocks=64, block_size=16)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.cpu() - b).norm() / b.norm()).item()


def test_default_cuda_load_is_bf16_and_quantized(case):
    path, _ = case
    lm = load_model(path, device="auto", tokenizer=False)
    assert lm.device.type == "cuda" and lm.dtype == torch.bfloat16
    assert lm.weights_bytes <= 1.1 * sum(t.n_bytes for t in lm.gguf.tensors.values()) + 2**20


@pytest.mark.parametrize("keep_quantized", [True, False])
def test_bf16_logits_close_to_hf(case, keep_quantized):
    path, hf = case
    r = runner(path, torch.bfloat16, keep_quantized)
    for ids in PROMPTS:
        err = rel_err(orcd_last_logits(r, ids), hf_last_logits(hf, ids))
        print(f"{path.stem} bf16 keep_quantized={keep_quantized} len={len(ids)} rel_err={err:.2e}")
        assert err < 2e-2


def test_fp32_logits_and_greedy_batch_match_hf(case):
    path, hf = case
    r = runner(path, torch.float32)
    for ids in PROMPTS:
        err = rel_err(orcd_last_logits(r, ids), hf_last_logits(hf, ids))
        print(f"{path.stem} fp32 len={len(ids)} rel_err={err:.2e}")
        assert err < 1e-4
    got = paged_greedy(r, PROMPTS, N_NEW, [len(PROMPTS[0]), len(PROMPTS[1]), 5])
    for ids, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == hf_greedy(hf, ids, N_NEW)


def test_batch_invariant_mode_matches_hf(case):
    """The batch-invariant kernels (orcd.numerics) are as exact as the default ones."""
    path, hf = case
    for dtype, bound in ((torch.bfloat16, 2e-2), (torch.float32, 1e-4)):
        lm = load_model(path, device="cuda", dtype=dtype, tokenizer=False)
        r = ModelRunner(lm, num_kv_blocks=64, block_size=16, batch_invariant=True)
        for ids in PROMPTS:
            err = rel_err(orcd_last_logits(r, ids), hf_last_logits(hf, ids))
            print(f"{path.stem} {dtype} batch_invariant len={len(ids)} rel_err={err:.2e}")
            assert err < bound
    got = paged_greedy(r, PROMPTS, N_NEW, [len(PROMPTS[0]), len(PROMPTS[1]), 5])  # fp32
    for ids, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == hf_greedy(hf, ids, N_NEW)
