"""gemma3 vs HF Gemma3ForCausalLM on tiny random GGUFs (fp32, CPU): a 6-layer model with llama.cpp's
default layer pattern (5 sliding-window layers, 1 global) and an 8-token window, so prompts, chunked
prefill and decode all cross the window edge."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from hf_from_gguf import hf_gemma3
from models_helpers import hf_greedy, hf_last_logits, orcd_last_logits, paged_greedy

from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner

pytest.importorskip("transformers")
WINDOW = 8
# head_dim 32 != hidden / n_heads = 16: the attention scale must come from head_dim
DIMS = dict(vocab_size=320, hidden=64, n_layers=6, ffn=128, n_heads=4, n_kv_heads=2, head_dim=32)
EXTRA = {"gemma3.attention.sliding_window": WINDOW}
CASES = {"gemma3-f32": {"default": Q.F32}, "gemma3-q8_0": {"default": Q.Q8_0}}
PROMPTS = [[7, 100, 42, 3, 250, 11, 19, 64, 5, 17, 33, 2, 90, 91, 92, 93, 8, 200, 5],  # 19 > window
           [1, 2, 3],
           list(range(40, 70))]  # 30 tokens, prefilled in chunks of 5
N_NEW = 32


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf"
    write_model_gguf(path, "gemma3", tied=True, qtypes=CASES[request.param], seed=3, rope_theta=1e6,
                     extra_metadata=EXTRA, **DIMS)
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    return ModelRunner(loaded, num_kv_blocks=64, block_size=4), hf_gemma3(path)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_config_reads_window_and_layer_pattern(case):
    cfg = case[0].model.cfg
    assert cfg.sliding_window == WINDOW and cfg.rope_theta_swa == 10000.0
    assert cfg.swa_layers == (True, True, True, True, True, False)


def test_last_position_logits_match_hf(case):
    runner, hf = case
    for ids in PROMPTS:
        assert rel_err(orcd_last_logits(runner, ids), hf_last_logits(hf, ids)) < 1e-4


def test_greedy_batch_with_chunked_prefill_matches_hf(case):
    """Three prompts at once: the first prefilled whole, the third in 5-token chunks across the window
    edge while the others decode; 32 new tokens each (well past the window)."""
    runner, hf = case
    got = paged_greedy(runner, PROMPTS, N_NEW, [len(PROMPTS[0]), len(PROMPTS[1]), 5])
    for ids, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == hf_greedy(hf, ids, N_NEW)


def test_synth_preset_plans_the_real_files_types():
    """`orcd synth --like gemma3-270m` lays out the real file's 236 tensors with its quant-type counts."""
    from collections import Counter

    from orcd.gguf.presets import PRESETS, plan_qtypes
    from orcd.gguf.synth import tensor_shapes

    p = PRESETS["gemma3-270m"]
    shapes = tensor_shapes(p["arch"], p["vocab_size"], p["hidden"], p["n_layers"], p["ffn"], p["n_heads"],
                           p["n_kv_heads"], p["tied"], p["head_dim"])
    plan = plan_qtypes(shapes, "Q4_K_M", p["n_layers"])
    assert len(shapes) == 236 and p["metadata"]["gemma3.attention.sliding_window"] == 512
    assert Counter(q.name for q in plan.values()) == {"Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}
