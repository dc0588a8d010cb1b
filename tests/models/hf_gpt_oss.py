"""HF transformers' GptOssForCausalLM (fp32, CPU, eager attention and experts) built from a gpt-oss GGUF's
dequantized tensors: the config from the file's metadata, the state dict from its tensors (llama.cpp's
converter split HF's interleaved gate_up_proj into ffn_gate_exps / ffn_up_exps and transposed both)."""

from __future__ import annotations

from pathlib import Path

import torch
from hf_from_gguf import gguf_tensors


def gpt_oss_config(md: dict, t: dict[str, torch.Tensor]):
    from transformers import GptOssConfig

    a = "gpt-oss."
    n_layers = md[a + "block_count"]
    rope = {"rope_type": "default", "rope_theta": md[a + "rope.freq_base"]}
    if md.get(a + "rope.scaling.type") == "yarn":
        rope |= {"rope_type": "yarn", "factor": md[a + "rope.scaling.factor"], "beta_fast": 32.0,
                 "beta_slow": 1.0, "truncate": False,
                 "original_max_position_embeddings": md[a + "rope.scaling.original_context_length"]}
    cfg = GptOssConfig(
        vocab_size=t["token_embd.weight"].shape[0], hidden_size=md[a + "embedding_length"],
        intermediate_size=md[a + "expert_feed_forward_length"], num_hidden_layers=n_layers,
        num_attention_heads=md[a + "attention.head_count"],
        num_key_value_heads=md[a + "attention.head_count_kv"],
        head_dim=md[a + "attention.key_length"], num_local_experts=md[a + "expert_count"],
        num_experts_per_tok=md[a + "expert_used_count"], sliding_window=md[a + "attention.sliding_window"],
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)],
        max_position_embeddings=md[a + "context_length"],
        rms_norm_eps=md[a + "attention.layer_norm_rms_epsilon"],
        rope_parameters=rope, tie_word_embeddings=False, pad_token_id=0, attention_bias=True)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def gpt_oss_state(t: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
          "lm_head.weight": t["output.weight"]}
    names = {"attn_norm.weight": "input_layernorm.weight",
             "post_attention_norm.weight": "post_attention_layernorm.weight",
             "attn_sinks.weight": "self_attn.sinks", "ffn_gate_inp.weight": "mlp.router.weight",
             "ffn_gate_inp.bias": "mlp.router.bias", "ffn_down_exps.bias": "mlp.experts.down_proj_bias"}
    for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
        names |= {f"{g}.weight": f"self_attn.{h}.weight", f"{g}.bias": f"self_attn.{h}.bias"}
    for i in range(n_layers):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        for g, h in names.items():
            sd[q + h] = t[p + g]
        gate, up = t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"]  # [E, F, H]
        e, f, h = gate.shape
        gate_up = torch.empty(e, h, 2 * f)  # HF: x @ gate_up, gate in the even columns, up in the odd
        gate_up[..., 0::2], gate_up[..., 1::2] = gate.transpose(1, 2), up.transpose(1, 2)
        bias = torch.empty(e, 2 * f)
        bias[:, 0::2], bias[:, 1::2] = t[p + "ffn_gate_exps.bias"], t[p + "ffn_up_exps.bias"]
        sd[q + "mlp.experts.gate_up_proj"], sd[q + "mlp.experts.gate_up_proj_bias"] = gate_up, bias
        down = t[p + "ffn_down_exps.weight"]  # [E, H, F]; HF: h @ down_proj[e], [F, H]
        sd[q + "mlp.experts.down_proj"] = down.transpose(1, 2).contiguous()
    return sd


def hf_gpt_oss(path: Path):
    """GptOssForCausalLM (fp32, eval) with the file's weights."""
    from transformers import GptOssForCausalLM

    md, t = gguf_tensors(path)
    cfg = gpt_oss_config(md, t)
    model = GptOssForCausalLM(cfg).eval()
    missing, unexpected = model.load_state_dict(gpt_oss_state(t, cfg.num_hidden_layers), strict=True)
    assert not missing and not unexpected, (missing, unexpected)
    return model
