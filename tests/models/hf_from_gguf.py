"""HF transformers reference models built from a GGUF file's dequantized tensors (fp32, CPU).

transformers' own GGUF loader cannot be trusted for these architectures (it ignores gemma3's
sliding-window pattern and keeps query_pre_attn_scalar at 256; it ignores qwen3's key_length), so the
HF config is written here from the file's metadata and the state dict from its tensors, then the HF
model class is run directly. The tensors are dequantized by orcd.quant.dequantize, which tests/quant
holds bit-exact to gguf-py's (gguf-py's numpy dequantizers take ~1 min on the 253 MB Gemma file).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from orcd.gguf.reader import open_gguf
from orcd.quant import dequantize


def gguf_tensors(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(metadata {key: value}, {name: float32 tensor in torch order}) of a GGUF file."""
    f = open_gguf(path)
    tensors = {}
    for name, t in f.tensors.items():
        raw = torch.from_numpy(np.array(t.data.reshape(-1, t.data.shape[-1]), copy=True))
        tensors[name] = dequantize(raw, t.qtype, t.shape).float()
    return f.metadata, tensors


def _gemma3_config(md: dict, t: dict[str, torch.Tensor]):
    from transformers import Gemma3TextConfig

    from orcd.gguf.config import SWA_DEFAULTS

    a = "gemma3."
    n_layers, heads = md[a + "block_count"], md[a + "attention.head_count"]
    hidden = md[a + "embedding_length"]
    head_dim = md.get(a + "attention.key_length", hidden // heads)
    pattern, theta_swa = SWA_DEFAULTS["gemma3"]  # llama.cpp's, when the file has no key
    pattern = md.get(a + "attention.sliding_window_pattern", pattern)
    theta_swa = md.get(a + "rope.freq_base_swa", theta_swa)
    local = [i % pattern < pattern - 1 for i in range(n_layers)]
    return Gemma3TextConfig(
        vocab_size=t["token_embd.weight"].shape[0], hidden_size=hidden,
        intermediate_size=md[a + "feed_forward_length"], num_hidden_layers=n_layers,
        num_attention_heads=heads, num_key_value_heads=md[a + "attention.head_count_kv"], head_dim=head_dim,
        rms_norm_eps=md[a + "attention.layer_norm_rms_epsilon"],
        sliding_window=md[a + "attention.sliding_window"],
        layer_types=["sliding_attention" if x else "full_attention" for x in local],
        query_pre_attn_scalar=head_dim, max_position_embeddings=md[a + "context_length"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": md[a + "rope.freq_base"]},
                         "sliding_attention": {"rope_type": "default", "rope_theta": theta_swa}},
        tie_word_embeddings="output.weight" not in t, pad_token_id=0, bos_token_id=2, eos_token_id=1,
        final_logit_softcapping=None, attn_logit_softcapping=None)


def _gemma3_state(t: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """HF names; llama.cpp stored every norm weight as 1 + w, HF keeps w."""
    sd = {"model.embed_tokens.weight": t["token_embd.weight"],
          "model.norm.weight": t["output_norm.weight"] - 1}
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    norms = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    for i in range(n_layers):
        for g, h in names.items():
            sd[f"model.layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"]
        for g, h in norms.items():
            sd[f"model.layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"] - 1
    if "output.weight" in t:
        sd["lm_head.weight"] = t["output.weight"]
    return sd


def _with_weights(model, sd: dict[str, torch.Tensor], t: dict[str, torch.Tensor] | None = None):
    """`model` holding `sd` (assigned, no second copy); the file's untied `output.weight` as lm_head
    when `t` is given; tied embeddings tied."""
    if t is not None and "output.weight" in t:
        sd = {**sd, "lm_head.weight": t["output.weight"]}
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    return model


def hf_gemma3(path: Path):
    """Gemma3ForCausalLM (fp32, eval) with the file's weights."""
    from transformers import Gemma3ForCausalLM

    md, t = gguf_tensors(path)
    cfg = _gemma3_config(md, t)
    model = Gemma3ForCausalLM(cfg).eval()
    sd = _gemma3_state(t, cfg.num_hidden_layers)
    return _with_weights(model, sd)


_LINEARS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj"}


def hf_qwen3(path: Path):
    """Qwen3ForCausalLM (fp32, eval) with the file's weights; head_dim from attention.key_length."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    md, t = gguf_tensors(path)
    a = "qwen3."
    n_layers, heads = md[a + "block_count"], md[a + "attention.head_count"]
    hidden = md[a + "embedding_length"]
    cfg = Qwen3Config(
        vocab_size=t["token_embd.weight"].shape[0], hidden_size=hidden,
        intermediate_size=md[a + "feed_forward_length"], num_hidden_layers=n_layers,
        num_attention_heads=heads, num_key_value_heads=md[a + "attention.head_count_kv"],
        head_dim=md.get(a + "attention.key_length", hidden // heads),
        rms_norm_eps=md[a + "attention.layer_norm_rms_epsilon"],
        max_position_embeddings=md[a + "context_length"],
        rope_parameters={"rope_type": "default", "rope_theta": md[a + "rope.freq_base"]},
        tie_word_embeddings="output.weight" not in t, attention_bias=False)
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"]}
    norms = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    for i in range(n_layers):
        for g, h in (_LINEARS | norms).items():
            sd[f"model.layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"]
    return _with_weights(Qwen3ForCausalLM(cfg).eval(), sd, t)


def hf_phi3(path: Path):
    """Phi3ForCausalLM (fp32, eval): attn_qkv is HF's qkv_proj, ffn_up its gate_up_proj (gate first)."""
    from transformers import Phi3Config, Phi3ForCausalLM

    md, t = gguf_tensors(path)
    a = "phi3."
    n_layers = md[a + "block_count"]
    cfg = Phi3Config(
        vocab_size=t["token_embd.weight"].shape[0], hidden_size=md[a + "embedding_length"],
        intermediate_size=md[a + "feed_forward_length"], num_hidden_layers=n_layers,
        num_attention_heads=md[a + "attention.head_count"],
        num_key_value_heads=md[a + "attention.head_count_kv"],
        rms_norm_eps=md[a + "attention.layer_norm_rms_epsilon"],
        max_position_embeddings=md[a + "context_length"],
        original_max_position_embeddings=md[a + "context_length"],
        rope_parameters={"rope_type": "default", "rope_theta": md[a + "rope.freq_base"]},
        tie_word_embeddings="output.weight" not in t, sliding_window=None, pad_token_id=0)
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"]}
    names = {"attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
             "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm"}
    for i in range(n_layers):
        for g, h in names.items():
            sd[f"model.layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"]
    return _with_weights(Phi3ForCausalLM(cfg).eval(), sd, t)
