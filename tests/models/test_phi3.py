"""phi3 vs HF Phi3ForCausalLM on tiny random GGUFs (fp32, CPU): fused attn_qkv and gate/up tensors,
split by rows at load; the HF model is built from the file's tensors."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from hf_from_gguf import hf_phi3
from models_helpers import PROMPTS, check_greedy_batch_matches_hf, check_last_logits_match_hf

from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner

pytest.importorskip("transformers")
DIMS = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2)
CASES = {"phi3-untied-f32": (False, {"default": Q.F32}), "phi3-untied-q8_0": (False, {"default": Q.Q8_0})}
N_NEW = 32


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    tied, qtypes = CASES[request.param]
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf"
    write_model_gguf(path, "phi3", tied=tied, qtypes=qtypes, seed=5, rope_theta=1e6, **DIMS)
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    return ModelRunner(loaded, num_kv_blocks=64, block_size=4), hf_phi3(path)


def test_last_position_logits_match_hf(case):
    check_last_logits_match_hf(*case, PROMPTS)


def test_greedy_batch_of_mixed_lengths_matches_hf(case):
    check_greedy_batch_matches_hf(*case, PROMPTS, N_NEW)
