"""gpt2 vs HF GPT2LMHeadModel on tiny random GGUFs (fp32, CPU), written here with llama.cpp's tensor names
and layout (HF's Conv1D weights transposed to [out, in]); the HF model is built from the same tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import quantize
from hf_from_gguf import gguf_tensors
from models_helpers import PROMPTS, check_greedy_batch_matches_hf, check_last_logits_match_hf

from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner

pytest.importorskip("transformers")
V, H, L, F, HEADS, CTX = 320, 64, 2, 256, 4, 128
N_NEW = 32


def write_gpt2(path, tied: bool, qtype: Q, seed: int = 7):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "gpt2")
    for key, value in {"context_length": CTX, "embedding_length": H, "feed_forward_length": F,
                       "block_count": L, "attention.head_count": HEADS}.items():
        w.add_uint32(f"gpt2.{key}", value)
    w.add_float32("gpt2.attention.layer_norm_epsilon", 1e-5)
    md = synthetic_tokenizer_metadata(V, "gpt2", seed)
    w.add_tokenizer_model(md["tokenizer.ggml.model"])
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_merges(md["tokenizer.ggml.merges"])

    def add(name, shape, std=0.05, mean=0.0):
        x = (mean + std * rng.standard_normal(shape)).astype(np.float32)
        if len(shape) == 1 or qtype == Q.F32 or name == "position_embd.weight":
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)

    add("token_embd.weight", (V, H))
    add("position_embd.weight", (CTX, H))
    for i in range(L):
        p = f"blk.{i}."
        for name, shape in (("attn_qkv", (3 * H, H)), ("attn_output", (H, H)), ("ffn_up", (F, H)),
                            ("ffn_down", (H, F))):
            add(p + name + ".weight", shape)
            add(p + name + ".bias", shape[:1], 0.02)
        for name in ("attn_norm", "ffn_norm"):
            add(p + name + ".weight", (H,), 0.1, 1.0)
            add(p + name + ".bias", (H,), 0.02)
    add("output_norm.weight", (H,), 0.1, 1.0)
    add("output_norm.bias", (H,), 0.02)
    if not tied:
        add("output.weight", (V, H))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_gpt2(path):
    from transformers import GPT2Config, GPT2LMHeadModel

    _, t = gguf_tensors(path)
    tied = "output.weight" not in t
    cfg = GPT2Config(vocab_size=V, n_positions=CTX, n_embd=H, n_layer=L, n_head=HEADS, n_inner=F,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, tie_word_embeddings=tied)
    sd = {"transformer.wte.weight": t["token_embd.weight"],
          "transformer.wpe.weight": t["position_embd.weight"],
          "transformer.ln_f.weight": t["output_norm.weight"], "transformer.ln_f.bias": t["output_norm.bias"]}
    conv = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_up": "mlp.c_fc",
            "ffn_down": "mlp.c_proj"}
    for i in range(L):
        for g, h in conv.items():  # HF's Conv1D keeps [in, out]
            sd[f"transformer.h.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"].T.contiguous()
            sd[f"transformer.h.{i}.{h}.bias"] = t[f"blk.{i}.{g}.bias"]
        for g, h in (("attn_norm", "ln_1"), ("ffn_norm", "ln_2")):
            sd[f"transformer.h.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"]
            sd[f"transformer.h.{i}.{h}.bias"] = t[f"blk.{i}.{g}.bias"]
    if not tied:
        sd["lm_head.weight"] = t["output.weight"]
    model = GPT2LMHeadModel(cfg).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if tied:
        model.tie_weights()
    return model


CASES = {"gpt2-tied-f32": (True, Q.F32), "gpt2-untied-q8_0": (False, Q.Q8_0)}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    path = write_gpt2(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", *CASES[request.param])
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    return ModelRunner(loaded, num_kv_blocks=64, block_size=4), hf_gpt2(path)


def test_last_position_logits_match_hf(case):
    check_last_logits_match_hf(*case, PROMPTS)


def test_greedy_batch_of_mixed_lengths_matches_hf(case):
    check_greedy_batch_matches_hf(*case, PROMPTS, N_NEW)


def test_pick_step_refuses_gpt2_by_name(tmp_path):
    """decode_graphs.pick_step on gpt2 (no gate/up): None, so the graphs replay model.forward. It once
    raised AttributeError from gathering the block's linears, which cost a model its CUDA graphs."""
    pytest.importorskip("triton")
    from orcd.runner.decode_graphs import pick_step
    from orcd.runner.fused_decode import FusedDecoder

    path = write_gpt2(tmp_path / "g.gguf", False, Q.Q8_0)
    model = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False, keep_quantized=True).model
    with pytest.raises(ValueError, match="gpt2 has no fused decode step"):
        FusedDecoder(model)
    assert pick_step(model) is None
