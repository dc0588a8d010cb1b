"""phi3 vs HF Phi3ForCausalLM on tiny random GGUFs (fp32, CPU): fused attn_qkv and gate/up tensors,
split by rows at load; the HF model is built from the file's tensors."""

from __future__ import annotations

import numpy as np
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


# ---- LongRoPE (Phi-3 128k): tiny files with rope_factors_long/short, against HF's "longrope" ----
ORIG = 32  # rope.scaling.original_context_length; HF switches to the long factors past it


def with_tensors(src, dst, extra: dict[str, np.ndarray]):
    """A copy of the GGUF src with more F32 tensors."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(src)
    w = GGUFWriter(dst, "phi3")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), main, sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    for name, arr in extra.items():
        w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def hf_phi3_longrope(path, long: np.ndarray, short: np.ndarray):
    hf = hf_phi3(path)  # then LongRoPE in its config and rotary embedding
    from transformers import Phi3ForCausalLM

    cfg = hf.config
    cfg.original_max_position_embeddings = ORIG
    cfg.rope_parameters = {"rope_type": "longrope", "rope_theta": cfg.rope_parameters["rope_theta"],
                           "long_factor": long.tolist(), "short_factor": short.tolist()}
    model = Phi3ForCausalLM(cfg).eval()
    model.load_state_dict(hf.state_dict(), assign=True)
    return model


@pytest.fixture(scope="module", params=[128, ORIG])  # context 128: long factors, attn_factor > 1; 32: short
def longrope_case(request, tmp_path_factory):
    ctx = request.param
    d = tmp_path_factory.mktemp(f"longrope{ctx}")
    rng = np.random.default_rng(0)
    half = DIMS["hidden"] // DIMS["n_heads"] // 2
    long, short = rng.uniform(1.0, 8.0, half), rng.uniform(1.0, 1.5, half)
    base = write_model_gguf(d / "base.gguf", "phi3", tied=False, qtypes={"default": Q.F32}, seed=5,
                            rope_theta=1e4, context_length=ctx,
                            extra_metadata={"phi3.rope.scaling.original_context_length": ORIG}, **DIMS)
    path = with_tensors(base, d / "longrope.gguf", {"rope_factors_long.weight": long,
                                                      "rope_factors_short.weight": short})
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    return ctx, ModelRunner(loaded, num_kv_blocks=64, block_size=4), hf_phi3_longrope(path, long, short)


def test_longrope_matches_hf(longrope_case):
    """Context 128 > 32: long factors, attn_factor sqrt(1 + ln 4 / ln 32); prompts past 32 positions (where
    HF uses the long factors too). Context 32: short factors, attn_factor 1, prompts within 32."""
    ctx, runner, hf = longrope_case
    scale = runner.model.blocks[0].attn.scale * (DIMS["hidden"] // DIMS["n_heads"]) ** 0.5
    assert scale == pytest.approx(1 + np.log(4) / np.log(ORIG) if ctx > ORIG else 1.0)
    g = torch.Generator().manual_seed(1)
    n = 40 if ctx > ORIG else 12
    prompts = [torch.randint(1, 300, (k,), generator=g).tolist() for k in (n, n + 3)]
    check_last_logits_match_hf(runner, hf, prompts)
    if ctx > ORIG:
        check_greedy_batch_matches_hf(runner, hf, prompts, 16)
