"""The CPU equality test on NCCL: 2 GPUs (float32 compute) give the greedy tokens of 1 GPU.

Needs >= 2 GPUs; not run in the session that wrote it (no multi-GPU machine was lent)."""

from __future__ import annotations

import json

import pytest
import torch
from test_tensor_parallel import N_TOKENS, PROMPTS, model_paths  # noqa: F401 (fixture)
from tp_workers import ENGINE_KW, greedy_rank, greedy_tokens

from orcd.distributed.runtime import launch
from orcd.engine.llm_engine import LLMEngine
from orcd.loading.loader import load_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")]


def test_two_nccl_ranks_match_one_gpu(model_paths, tmp_path):  # noqa: F811
    out = tmp_path / "tp.json"
    assert launch(2, "cuda", greedy_rank, (model_paths, PROMPTS, N_TOKENS, str(out), torch.float32)) == 0
    got = json.loads(out.read_text())
    for name, path in model_paths.items():
        engine = LLMEngine(load_model(path, "cuda:0", dtype=torch.float32), enforce_eager=True, **ENGINE_KW)
        assert got[name] == greedy_tokens(engine, PROMPTS, N_TOKENS), name
