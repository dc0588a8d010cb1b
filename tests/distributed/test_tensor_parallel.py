"""Tensor parallelism on the CPU: 2 gloo ranks give exactly the greedy tokens of 1 rank."""

from __future__ import annotations

import json

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from tp_workers import ENGINE_KW, greedy_rank, greedy_tokens

from orcd.cli.main import main
from orcd.distributed.runtime import launch
from orcd.engine.llm_engine import LLMEngine
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

N_TOKENS = 32
PROMPTS = [[1, 17, 42, 99, 7, 3, 250, 61, 8, 12, 5, 77, 300, 2, 90, 44, 19, 23, 31], [5, 6, 7, 8, 9, 10, 11]]
# vocab 321: uneven vocabulary shards (padded all-gather); ffn 96: 3 Q8_0 blocks -> 64 + 32 columns
DIMS = dict(vocab_size=321, hidden=64, n_layers=2, ffn=96, n_heads=4, context_length=256)
# name -> (arch, n_kv_heads, default type, tied)
CASES = {
    "qwen2-kv2-f32": ("qwen2", 2, Q.F32, True),
    "qwen2-kv2-q8_0": ("qwen2", 2, Q.Q8_0, False),
    "qwen2-kv1-f32": ("qwen2", 1, Q.F32, False),  # one KV head, replicated on both ranks
    "qwen2-kv1-q8_0": ("qwen2", 1, Q.Q8_0, True),
    "llama-kv2-q8_0": ("llama", 2, Q.Q8_0, False),  # Q/K rows un-permuted before the head split
}


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tp")
    return {name: str(write_model_gguf(d / f"{name}.gguf", arch, n_kv_heads=kv, qtypes={"default": q},
                                       tied=tied, seed=3, **DIMS))
            for name, (arch, kv, q, tied) in CASES.items()}


def one_rank_tokens(path: str) -> list[list[int]]:
    return greedy_tokens(LLMEngine(load_model(path, "cpu"), **ENGINE_KW), PROMPTS, N_TOKENS)


def test_two_gloo_ranks_match_one_rank(model_paths, tmp_path):
    out = tmp_path / "tp.json"
    assert launch(2, "cpu", greedy_rank, (model_paths, PROMPTS, N_TOKENS, str(out)), threads=1) == 0
    got = json.loads(out.read_text())
    # the steps overlapped (TPRunner.launch: input ids broadcast from rank 0's device)
    assert all(n > N_TOKENS // 2 for n in got["overlapped"].values()), got["overlapped"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, path in model_paths.items():
            want = one_rank_tokens(path)
            assert [len(t) for t in want] == [N_TOKENS] * len(PROMPTS)
            assert got[name] == want, name
    finally:
        torch.set_num_threads(threads)


def test_generate_cli_with_two_ranks_prints_the_one_rank_text(model_paths, capfd):
    argv = ["generate", "--model", model_paths["qwen2-kv2-q8_0"], "--device", "cpu", "--quiet",
            "--max-tokens", "16", "--temperature", "0", "--ignore-eos", "Hello there"]
    assert main(argv) == 0
    want = capfd.readouterr().out
    assert main([*argv, "--tensor-parallel", "2"]) == 0
    got = capfd.readouterr()
    assert got.out == want and want != ""


def test_all_reduce_option_runs_with_ranks_and_is_refused_without(model_paths, capfd):
    """--all-reduce symm reaches the ranks (on the CPU the decode step has no fused all-reduce to swap:
    the same text); without --tensor-parallel it is refused by name, before the model loads."""
    argv = ["generate", "--model", model_paths["qwen2-kv2-q8_0"], "--device", "cpu", "--quiet",
            "--max-tokens", "8", "--temperature", "0", "--ignore-eos", "Hello there"]
    assert main(argv) == 0
    want = capfd.readouterr().out
    assert main([*argv, "--tensor-parallel", "2", "--all-reduce", "symm"]) == 0
    assert capfd.readouterr().out == want != ""
    assert main([*argv, "--all-reduce", "symm"]) != 0
    assert "--all-reduce symm is for --tensor-parallel" in capfd.readouterr().err
