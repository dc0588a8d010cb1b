"""write_model_gguf / presets / `orcd synth`: files that orcd, gguf-py and HF transformers all read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quants

from orcd.cli.main import main
from orcd.gguf import open_gguf
from orcd.gguf.presets import PRESETS, plan_qtypes
from orcd.gguf.synth import resolve_qtype, tensor_shapes, write_model_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata

DIMS = dict(vocab_size=512, hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2)
MIX = {"default": Q.Q4_K, "token_embd": Q.Q8_0, "attn_q": Q.Q2_K, "attn_k": Q.Q3_K, "attn_v": Q.Q5_K,
       "attn_output": Q.Q4_0, "ffn_gate": Q.Q4_1, "ffn_up": Q.Q5_1, "ffn_down": Q.Q6_K, "output": Q.BF16}


def preset_plan(name: str) -> dict:
    p = PRESETS[name]
    shapes = tensor_shapes(p["arch"], p["vocab_size"], p["hidden"], p["n_layers"], p["ffn"], p["n_heads"],
                           p["n_kv_heads"], p["tied"])
    return plan_qtypes(shapes, "Q4_K_M", p["n_layers"])


def test_pattern_resolution() -> None:
    assert resolve_qtype("blk.0.attn_output.weight", (4, 32), MIX) == Q.Q4_0  # not "output"
    assert resolve_qtype("output.weight", (4, 32), MIX) == Q.BF16
    assert resolve_qtype("blk.1.attn_norm.weight", (32,), MIX) == Q.F32
    assert resolve_qtype("blk.1.ffn_down.weight", (4, 32), {"blk.1.*": Q.Q8_0}) == Q.Q8_0
    assert resolve_qtype("blk.1.ffn_down.weight", (4, 32), {}) == Q.F32


def test_every_type_finite_and_modest(tmp_path: Path) -> None:
    f = open_gguf(write_model_gguf(tmp_path / "m.gguf", "qwen2", tied=False, qtypes=MIX, **DIMS))
    seen = Counter(t.qtype for t in f.tensors.values())
    assert set(seen) == {Q.F32, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q5_K, Q.Q4_0, Q.Q4_1, Q.Q5_1, Q.Q6_K, Q.BF16}
    for t in f.tensors.values():
        w = np.asarray(quants.dequantize(t.data, t.qtype), np.float32)
        assert np.isfinite(w).all(), t.name
        if "norm" in t.name:
            assert 0.5 < w.mean() < 1.5, t.name
        else:
            assert 0.005 < w.std() < 0.2, (t.name, w.std())


@pytest.mark.parametrize("arch,tied", [("qwen2", True), ("llama", False)])
def test_hf_transformers_loads_it(tmp_path: Path, arch: str, tied: bool) -> None:
    from transformers import AutoModelForCausalLM

    path = write_model_gguf(tmp_path / f"{arch}.gguf", arch, tied=tied, seed=5,
                            qtypes={"default": Q.Q8_0, "ffn_down": Q.Q4_K}, **DIMS)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32)
    assert model.config.tie_word_embeddings == tied and model.config.num_hidden_layers == 2
    f = open_gguf(path)
    emb = f.tensors["token_embd.weight"]
    want = torch.from_numpy(np.asarray(quants.dequantize(emb.data, emb.qtype), np.float32))
    assert torch.equal(model.get_input_embeddings().weight, want.reshape(512, 256))
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4, 5]])).logits
    assert torch.isfinite(logits).all() and 0.1 < logits.std() < 10  # well-conditioned


def test_qwen25_05b_plan_matches_llama_cpp_q4_k_m() -> None:
    plan = preset_plan("qwen2.5-0.5b")
    assert plan["token_embd.weight"] == Q.Q8_0 and "output.weight" not in plan
    for i in range(24):
        for name in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            assert plan[f"blk.{i}.{name}.weight"] == Q.Q5_0  # 896-wide rows: no K-quants
        assert plan[f"blk.{i}.attn_v.weight"] in (Q.Q8_0, Q.Q5_0)
        assert plan[f"blk.{i}.ffn_down.weight"] in (Q.Q6_K, Q.Q4_K)  # 4864 = 19 x 256
    counts = Counter(plan.values())
    assert counts[Q.Q6_K] == counts[Q.Q4_K] == 12 and counts[Q.Q8_0] == 13


def test_qwen25_7b_plan_is_real_k_quants() -> None:
    plan = preset_plan("qwen2.5-7b")
    assert set(plan.values()) == {Q.Q4_K, Q.Q6_K} and plan["output.weight"] == Q.Q6_K


def test_synthetic_vocab_is_consistent_bpe() -> None:
    from tokenizers import Tokenizer, models

    md = synthetic_tokenizer_metadata(3000, "qwen2")
    tokens, merges = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"]
    assert len(tokens) == len(set(tokens)) == 3000 and len(md["tokenizer.ggml.token_type"]) == 3000
    index = set(tokens)
    assert all(a in index and b in index and a + b in index for a, b in (m.split(" ") for m in merges))
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ")) for m in merges]))
    assert tok.get_vocab_size() == 3000
    assert tokens[md["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"


def test_synth_cli(tmp_path: Path, capsys) -> None:
    out = tmp_path / "t.gguf"
    assert main(["synth", "--like", "tiny-qwen2", "--quant", "Q6_K", str(out)]) == 0
    f = open_gguf(out)
    assert f.metadata["qwen2.embedding_length"] == 64
    assert {t.qtype for t in f.tensors.values()} == {Q.F32, Q.Q8_0}  # 64-wide rows: Q6_K -> Q8_0
    assert "Q8_0 x15" in capsys.readouterr().err
    assert main(["synth", "--like", "tiny-llama", "--quant", "Q9_Z", str(out)]) == 2
