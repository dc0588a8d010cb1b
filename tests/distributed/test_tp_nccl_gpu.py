"""Tensor parallelism on NCCL (>= 2 GPUs): the CPU (gloo) checks again, on cuda:0 and cuda:1.

- greedy tokens at 2 ranks (float32 compute; decode steps from CUDA graphs holding the collectives) equal
  those of 1 GPU (eager), for every reference model;
- a seeded request gives the same tokens alone and batched at 2 ranks (bfloat16, batch-invariant kernels);
- prefill graphs at 2 ranks (bfloat16, captured by both at start, NCCL inside): fresh prompts replay
  them, alone and beside decode rows (split steps), with the tokens of eager prefill;
- `orcd serve --tensor-parallel 2 --device cuda` streams the 1-GPU text, cancels, survives a disconnect
  storm and leaves no process behind on SIGTERM.
NVLink multicast stays off in every rank (orcd.distributed.runtime.RANK_ENV)."""

from __future__ import annotations

import json

import pytest
import torch
from serve_check import check_server, start_server
from test_tensor_parallel import N_TOKENS, PROMPTS, model_paths  # noqa: F401 (fixture)
from test_tp_invariant import PROMPTS as SEEDED_PROMPTS
from test_tp_serve import MAX_TOKENS, PROMPT, one_rank_text, serve_model
from tp_workers import ENGINE_KW, greedy_rank, greedy_tokens, prefill_graph_rank, seeded_rank

from orcd.distributed.runtime import launch
from orcd.engine.llm_engine import LLMEngine
from orcd.loading.loader import load_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")]


def test_two_nccl_ranks_match_one_gpu(model_paths, tmp_path):  # noqa: F811
    out = tmp_path / "tp.json"
    assert launch(2, "cuda", greedy_rank, (model_paths, PROMPTS, N_TOKENS, str(out), torch.float32)) == 0
    got = json.loads(out.read_text())
    # decode steps replayed graphs of model.forward, NCCL collectives inside (orcd.distributed.tp_runner)
    assert all(steps.get("decode_graph", 0) > 0 for steps in got["executors"].values()), got["executors"]
    # decode steps overlapped: input ids broadcast from rank 0's device (TPRunner.launch)
    assert all(n > 0 for n in got["overlapped"].values()), got["overlapped"]
    mismatched = []
    for name, path in model_paths.items():
        engine = LLMEngine(load_model(path, "cuda:0", dtype=torch.float32), enforce_eager=True, **ENGINE_KW)
        if got[name] != greedy_tokens(engine, PROMPTS, N_TOKENS):
            mismatched.append(name)
    assert mismatched == []


def test_prefill_graphs_on_two_nccl_ranks(model_paths, tmp_path):  # noqa: F811
    out = tmp_path / "prefill.json"
    prompts = [[(7 + 13 * i + j) % 320 + 1 for j in range(n)] for i, n in enumerate((3, 40, 65, 130, 200))]
    assert launch(2, "cuda", prefill_graph_rank, (model_paths["qwen2-kv2-q8_0"], prompts, str(out))) == 0
    got = json.loads(out.read_text())
    ran = got["graphs_executors"]
    assert ran.get("prefill_graph", 0) > 0 and ran.get("split_step", 0) > 0, ran
    assert "prefill_graph" not in got["eager_executors"] and "split_step" not in got["eager_executors"]
    assert [len(t) for t in got["graphs"]] == [6] * len(prompts)
    agree = sum(a[0] == b[0] for a, b in zip(got["graphs"], got["eager"], strict=True))
    assert agree >= len(prompts) - 1, got  # bf16 near-ties aside (padded GEMM shapes), the same tokens


def test_seeded_request_is_batch_invariant_on_two_nccl_ranks(model_paths, tmp_path):  # noqa: F811
    out = tmp_path / "seeded.json"
    path = model_paths["qwen2-kv2-q8_0"]
    assert launch(2, "cuda", seeded_rank, (path, SEEDED_PROMPTS, str(out))) == 0
    got = json.loads(out.read_text())
    assert got["policy"] == "seeded" and len(got["alone"]) == 24
    assert got["batched"] == got["alone"]


def test_nccl_server_streams_cancels_and_stops_on_sigterm(tmp_path):
    path = serve_model(tmp_path)
    want = one_rank_text(path, MAX_TOKENS, "cuda:0", torch.float32)
    proc, url = start_server(path, "cuda", 2, tmp_path / "serve.log", "--dtype", "float32")
    try:
        check_server(proc, url, PROMPT, want, MAX_TOKENS)
    finally:
        print((tmp_path / "serve.log").read_text()[-4000:])  # the ranks' stderr, for a failing run


# Q6_K weights the TP=2 int8 step reads split on every rank (load_sharded's q6k_layout="auto", issue 21)
TP_SPLIT = ["blocks.0.attn.v_proj", "blocks.0.mlp.down.inner", "blocks.1.attn.v_proj",
            "blocks.1.mlp.down.inner", "lm_head.inner"]


@pytest.mark.parametrize(("all_reduce", "batch", "layout"),
                         [("nccl", 3, "auto"), ("symm", 3, "auto"), ("nccl", 8, "auto"), ("nccl", 3, "gguf"),
                          ("nccl", 8, "gguf")])
def test_tp_fused_int8_step_matches_one_gpu(tmp_path, all_reduce, batch, layout):
    """The TP fused step on the int8-activation GEMVs (bf16, Q4_K_M mix) == one GPU's FusedDecoder,
    with NCCL's all-reduce and with the symmetric-memory one-shot one (symm_allreduce.py); 8 rows: the
    unfused step (add+RMSNorm kernels, the rank's q/k/v slices in one batched_qkv launch). layout: the
    q6k_layout of both sides; "auto" (the default) splits each rank's Q6_K v, downs and head rows after
    slicing, "gguf" none."""
    from gguf import GGMLQuantizationType as Q
    from tp_workers import fused_int8_rank, fused_steps

    from orcd.gguf.synth import write_model_gguf
    from orcd.runner.fused_decode import FusedDecoder

    types = {"default": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K}
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=512, hidden=512, n_layers=2, ffn=1024,
                            n_heads=4, n_kv_heads=2, head_dim=128, context_length=256, qtypes=types,
                            tied=False, seed=5, tokenizer_metadata={})
    out = tmp_path / "tp.pt"
    assert launch(2, "cuda", fused_int8_rank, (str(path), str(out), all_reduce, batch, layout)) == 0
    got = torch.load(out)
    assert got["int8"] == [True, True, True]
    assert got["all_reduce"] == all_reduce  # symm: no silent fallback to NCCL
    assert got["split"] == {r: TP_SPLIT if layout == "auto" else [] for r in (0, 1)}
    loaded = load_model(path, "cuda:0", dtype=torch.bfloat16, tokenizer=False, q6k_layout=layout)
    with torch.inference_mode():
        want = fused_steps(FusedDecoder(loaded.model), loaded.cfg, "cuda:0", torch.bfloat16, batch=batch)
    # bf16 partial sums rounded per rank before the all-reduce; a missing or doubled partial gives O(1)
    errs = [float((g - w).norm() / w.norm()) for g, w in zip(got["logits"], want, strict=True)]
    assert max(errs) < 5e-2, errs


@pytest.mark.skipif(torch.cuda.device_count() < 4, reason="needs 4 CUDA GPUs")
@pytest.mark.parametrize("all_reduce", ["nccl", "symm"])
def test_four_ranks_fused_int8_step_matches_one_gpu(tmp_path, all_reduce):
    """As above on 4 ranks (hidden and FFN 1024: one Q4_K super-block of each rank's o and down inputs;
    8 query / 4 KV heads: one KV head a rank), one and 8 rows, with NCCL's all-reduce and the one-shot
    (symm) one: the check a one-shot default at TP >= 4 wants."""
    from gguf import GGMLQuantizationType as Q
    from tp_workers import fused_int8_rank, fused_steps

    from orcd.gguf.synth import write_model_gguf
    from orcd.runner.fused_decode import FusedDecoder

    types = {"default": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K}
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=512, hidden=1024, n_layers=2, ffn=1024,
                            n_heads=8, n_kv_heads=4, head_dim=128, context_length=256, qtypes=types,
                            tied=False, seed=5, tokenizer_metadata={})
    loaded = load_model(path, "cuda:0", dtype=torch.bfloat16, tokenizer=False)
    for batch in (1, 8):
        out = tmp_path / f"tp4_{batch}.pt"
        assert launch(4, "cuda", fused_int8_rank, (str(path), str(out), all_reduce, batch, "auto")) == 0
        got = torch.load(out)
        assert got["all_reduce"] == all_reduce and sorted(got["split"]) == [0, 1, 2, 3]
        with torch.inference_mode():
            want = fused_steps(FusedDecoder(loaded.model), loaded.cfg, "cuda:0", torch.bfloat16, batch=batch)
        errs = [float((g - w).norm() / w.norm()) for g, w in zip(got["logits"], want, strict=True)]
        assert max(errs) < 5e-2, (batch, errs)
