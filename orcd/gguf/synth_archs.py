"""Tensor layouts of the architectures beyond qwen2/llama for the synthetic writer (synth.py).

Each function returns name -> torch-order shape ([out, in] for weights) with llama.cpp's tensor names;
1-D tensors (norms, biases) are written F32 by synth.py's rule, norm weights near 1.
"""

from __future__ import annotations

Shape = tuple[int, ...]


def _common(vocab: int, hidden: int, tied: bool, layers: dict[str, Shape], n_layers: int) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {"token_embd.weight": (vocab, hidden)}
    for i in range(n_layers):
        shapes |= {f"blk.{i}.{name}": shape for name, shape in layers.items()}
    shapes["output_norm.weight"] = (hidden,)
    if not tied:
        shapes["output.weight"] = (vocab, hidden)
    return shapes


def _gated(hidden: int, ffn: int, q: int, kv: int) -> dict[str, Shape]:
    return {"attn_norm.weight": (hidden,), "attn_q.weight": (q, hidden), "attn_k.weight": (kv, hidden),
            "attn_v.weight": (kv, hidden), "attn_output.weight": (hidden, q), "ffn_norm.weight": (hidden,),
            "ffn_gate.weight": (ffn, hidden), "ffn_up.weight": (ffn, hidden),
            "ffn_down.weight": (hidden, ffn)}


def arch_tensor_shapes(arch: str, vocab: int, hidden: int, n_layers: int, ffn: int, n_heads: int,
                       n_kv_heads: int, tied: bool, head_dim: int) -> dict[str, Shape] | None:
    """The layout of `arch`, or None for the archs synth.py lays out itself (qwen2, llama)."""
    q, kv = n_heads * head_dim, n_kv_heads * head_dim
    qk_norm = {"attn_q_norm.weight": (head_dim,), "attn_k_norm.weight": (head_dim,)}
    if arch == "gemma3":  # QK-norm, post-attention and post-FFN norms
        layers = _gated(hidden, ffn, q, kv) | qk_norm
        layers |= {"post_attention_norm.weight": (hidden,), "post_ffw_norm.weight": (hidden,)}
    elif arch == "qwen3":  # QK-norm, no biases
        layers = _gated(hidden, ffn, q, kv) | qk_norm
    elif arch == "phi3":  # fused q/k/v rows and gate/up rows (gate first)
        layers = {"attn_norm.weight": (hidden,), "attn_qkv.weight": (q + 2 * kv, hidden),
                  "attn_output.weight": (hidden, q), "ffn_norm.weight": (hidden,),
                  "ffn_up.weight": (2 * ffn, hidden), "ffn_down.weight": (hidden, ffn)}
    else:
        return None
    return _common(vocab, hidden, tied, layers, n_layers)


ARCHS = ("gemma3", "qwen3", "phi3")
