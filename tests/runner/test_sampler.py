"""Sampler: each option shapes the distribution as documented; seeded draws are batch-invariant."""

from __future__ import annotations

import pytest
import torch

from orcd.engine.sampling_params import SamplingParams as SP
from orcd.runner.sampler import SampleRow, apply_penalties, sample, uniform_noise

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])
LOGITS = PROBS.log()


def draw(params: SP, n: int = 4000, logits: torch.Tensor = LOGITS, step: int = 0) -> torch.Tensor:
    """n seeded draws (seeds 0..n-1) of one distribution -> token counts [V]."""
    rows = [SampleRow(SP(**{**params.__dict__, "seed": s}), [], step) for s in range(n)]
    toks = sample(logits.expand(n, -1).clone(), rows)
    return torch.bincount(toks, minlength=logits.shape[-1])


def test_greedy_is_argmax_and_ignores_seed():
    logits = torch.randn(5, 50)
    rows = [SampleRow(SP(temperature=0.0, seed=i)) for i in range(5)]
    assert torch.equal(sample(logits, rows), logits.argmax(-1))


def test_temperature_one_follows_softmax():
    freq = draw(SP(temperature=1.0)).float() / 4000
    torch.testing.assert_close(freq, PROBS, atol=0.03, rtol=0)


def test_temperature_sharpens_and_flattens():
    cold = draw(SP(temperature=0.25)).float() / 4000
    hot = draw(SP(temperature=4.0)).float() / 4000
    expect_cold = (LOGITS / 0.25).softmax(-1)
    expect_hot = (LOGITS / 4.0).softmax(-1)
    torch.testing.assert_close(cold, expect_cold, atol=0.03, rtol=0)
    torch.testing.assert_close(hot, expect_hot, atol=0.03, rtol=0)


@pytest.mark.parametrize(
    "params, allowed",
    [(SP(top_k=2), {0, 1}), (SP(top_k=1), {0}), (SP(top_p=0.7), {0, 1}), (SP(top_p=0.5), {0}),
     (SP(min_p=0.4), {0, 1}), (SP(min_p=0.2), {0, 1, 2}), (SP(top_k=3, top_p=0.9), {0, 1, 2})],
)
def test_filters_restrict_support(params, allowed):
    counts = draw(params, n=2000)
    support = {i for i, c in enumerate(counts.tolist()) if c}
    assert support == allowed
    if len(allowed) > 1:  # survivors keep their relative odds (renormalized)
        p = PROBS[sorted(allowed)] / PROBS[sorted(allowed)].sum()
        torch.testing.assert_close(counts[sorted(allowed)].float() / 2000, p, atol=0.04, rtol=0)


def test_repetition_penalty_like_hf():
    logits = torch.tensor([[2.0, -1.0, 3.0, 0.5]])
    out = apply_penalties(logits, [SampleRow(SP(repetition_penalty=2.0), [0, 1, 1])])
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 3.0, 0.5]]))


def test_presence_and_frequency_penalties():
    logits = torch.zeros(1, 4)
    row = SampleRow(SP(presence_penalty=0.5, frequency_penalty=0.25), [2, 2, 2, 0])
    out = apply_penalties(logits, [row])
    assert torch.equal(out, torch.tensor([[-0.75, 0.0, -1.25, 0.0]]))


def test_penalty_changes_greedy_choice_only_for_its_row():
    logits = torch.tensor([[3.0, 2.9, 0.0], [3.0, 2.9, 0.0]])
    rows = [SampleRow(SP(temperature=0.0, repetition_penalty=1.5), [0]), SampleRow(SP(temperature=0.0), [0])]
    assert sample(logits, rows).tolist() == [1, 0]


@pytest.mark.parametrize("params", [SP(temperature=1.0, top_p=0.95, seed=1234), SP(temperature=0.9, seed=77)])
def test_same_seed_same_token_alone_and_in_any_batch(params):
    torch.manual_seed(0)
    logits = torch.randn(16, 1000)  # flat enough that the noise decides
    target = SampleRow(params, [], 7)
    alone = sample(logits[3:4].clone(), [target]).item()
    others = [SampleRow(SP(temperature=t, top_k=k, seed=s), [], g)
              for t, k, s, g in [(0.7, 0, 1, 0), (1.3, 50, None, 3), (0.0, 0, 9, 1)]]  # filters in the batch
    for pos in range(4):
        rows = others[:pos] + [target] + others[pos:]
        batch = torch.cat([logits[:pos], logits[3:4], logits[pos + 4 : pos + 4 + 3 - pos]])
        assert sample(batch.clone(), rows)[pos].item() == alone


def test_seeded_noise_varies_with_step_and_seed_not_batch():
    keys = torch.tensor([11, 12], dtype=torch.int64)
    u = uniform_noise(keys, 5000)
    assert torch.equal(u[1], uniform_noise(keys[1:], 5000)[0])
    assert not torch.equal(u[0], u[1])
    assert 0.0 < u.min() and u.max() < 1.0 and abs(u.mean().item() - 0.5) < 0.01
    a = [sample(torch.zeros(1, 1000), [SampleRow(SP(seed=5), [], g)]).item() for g in range(8)]
    assert len(set(a)) > 4  # a different draw at every step


def test_unseeded_rows_are_random():
    rows = [SampleRow(SP(temperature=1.0)) for _ in range(16)]
    a, b = sample(torch.zeros(16, 1000), rows), sample(torch.zeros(16, 1000), rows)
    assert not torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_draws_equal_cpu_draws():
    torch.manual_seed(1)
    logits = torch.randn(8, 3000)
    rows = [SampleRow(SP(temperature=0.8, top_k=100, top_p=0.9, min_p=0.01, seed=s,
                         repetition_penalty=1.2), [1, 2, 3], s) for s in range(8)]
    assert sample(logits.cuda(), rows).cpu().tolist() == sample(logits, rows).tolist()
