"""orcd vs HF transformers on the same tiny random GGUF files (fp32, CPU)."""

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

pytest.importorskip("transformers")
N_NEW = 32


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    path = write_case(tmp_path_factory.mktemp(request.param), request.param)
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    hf, memo = hf_model(path), {}

    def reference(i: int) -> list[int]:  # HF greedy continuation of PROMPTS[i], computed once
        if i not in memo:
            memo[i] = hf_greedy(hf, PROMPTS[i], N_NEW)
        return memo[i]

    return ModelRunner(loaded, num_kv_blocks=64, block_size=4), hf, reference


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_last_position_logits_match_hf(case):
    runner, hf, _ = case
    for ids in PROMPTS:
        assert rel_err(orcd_last_logits(runner, ids), hf_last_logits(hf, ids)) < 1e-4


def test_greedy_single_prompt_matches_hf(case):
    runner, _, reference = case
    ids = PROMPTS[0]
    assert paged_greedy(runner, [ids], N_NEW, [len(ids)])[0] == reference(0)


def test_greedy_batch_of_mixed_lengths_matches_hf(case):
    """Three prompts at once; the longest is prefilled in 5-token chunks while the others decode."""
    runner, _, reference = case
    got = paged_greedy(runner, PROMPTS, N_NEW, [len(PROMPTS[0]), len(PROMPTS[1]), 5])
    for i, tokens in enumerate(got):
        assert tokens == reference(i)
