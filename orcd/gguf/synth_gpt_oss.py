"""Random-weight gpt-oss GGUF files, laid out as llama.cpp's converter writes them (conversion/gpt_oss.py):
tensor names and torch-order shapes, metadata keys, MXFP4 experts.

Per layer: attn_norm, attn_{q,k,v,output} weights and biases, attn_sinks [n_heads], post_attention_norm,
ffn_gate_inp (router, weight [E, H] + bias [E]) and ffn_{gate,up,down}_exps: weights [E, F, H] / [E, H, F]
and biases [E, F] / [E, H]. The head is untied (output.weight).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType, LlamaFileType

from orcd.gguf import config as K
from orcd.gguf.synth import model_metadata, resolve_qtype, write_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata

Q = GGMLQuantizationType
ARCH = "gpt-oss"
EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def gpt_oss_shapes(vocab_size: int, hidden: int, n_layers: int, ffn: int, n_heads: int, n_kv_heads: int,
                   head_dim: int, n_experts: int) -> dict[str, tuple[int, ...]]:
    """name -> torch-order shape, in llama.cpp's file order; ffn = one expert's intermediate width."""
    q, kv, e = n_heads * head_dim, n_kv_heads * head_dim, n_experts
    layer = {
        "attn_norm.weight": (hidden,), "attn_q.weight": (q, hidden), "attn_q.bias": (q,),
        "attn_k.weight": (kv, hidden), "attn_k.bias": (kv,), "attn_v.weight": (kv, hidden),
        "attn_v.bias": (kv,), "attn_output.weight": (hidden, q), "attn_output.bias": (hidden,),
        "attn_sinks.weight": (n_heads,), "post_attention_norm.weight": (hidden,),
        "ffn_gate_inp.weight": (e, hidden), "ffn_gate_inp.bias": (e,),
        "ffn_gate_exps.weight": (e, ffn, hidden), "ffn_gate_exps.bias": (e, ffn),
        "ffn_up_exps.weight": (e, ffn, hidden), "ffn_up_exps.bias": (e, ffn),
        "ffn_down_exps.weight": (e, hidden, ffn), "ffn_down_exps.bias": (e, hidden),
    }
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab_size, hidden)}
    for i in range(n_layers):
        shapes |= {f"blk.{i}.{name}": shape for name, shape in layer.items()}
    shapes["output_norm.weight"] = (hidden,)
    shapes["output.weight"] = (vocab_size, hidden)
    return shapes


def gpt_oss_qtypes(shapes: Mapping[str, tuple[int, ...]], quant: str = "MXFP4") -> dict[str, Q]:
    """The converter's MXFP4 file: experts MXFP4, the router and every 1-D tensor F32, the rest `rest`
    (Q8_0 for "MXFP4", the ggml-org 20b file's mix; else the one GGML type named, experts included)."""
    out: dict[str, Q] = {}
    for name, shape in shapes.items():
        if len(shape) == 1 or name.endswith(".bias") or ".ffn_gate_inp." in name:
            out[name] = Q.F32  # biases ([E, F] for experts) too; llama.cpp never quantizes the router
        elif quant.upper() == "MXFP4":
            out[name] = Q.MXFP4 if any(f".{t}." in name for t in EXPERT_TENSORS) else Q.Q8_0
        else:
            out[name] = Q[quant.upper()]
    return out


def write_gpt_oss_gguf(
    path: str | Path, *, vocab_size: int, hidden: int, n_layers: int, ffn: int, n_heads: int,
    n_kv_heads: int, head_dim: int, n_experts: int, n_experts_used: int, sliding_window: int = 128,
    context_length: int = 131072, rope_theta: float = 150000.0, yarn_factor: float = 32.0,
    yarn_orig_context: int = 4096, rms_eps: float = 1e-5,
    qtypes: Mapping[str, GGMLQuantizationType] | None = None, seed: int = 0,
    tokenizer_metadata: Mapping[str, Any] | None = None, extra_metadata: Mapping[str, Any] | None = None,
    tied: bool = False,
) -> Path:
    """Write a random-weight gpt-oss model (qtypes as write_model_gguf's; default MXFP4 experts, Q8_0
    rest). yarn_factor <= 1 writes no RoPE scaling keys. `tied` is accepted for the presets and must be
    False (gpt-oss files always have output.weight)."""
    if tied:
        raise ValueError("gpt-oss files have an untied head (output.weight)")
    shapes = gpt_oss_shapes(vocab_size, hidden, n_layers, ffn, n_heads, n_kv_heads, head_dim, n_experts)
    plan = gpt_oss_qtypes(shapes) if qtypes is None else {
        name: Q.F32 if name.endswith(".bias") else resolve_qtype(name, shape, qtypes)
        for name, shape in shapes.items()}
    a = ARCH + "."
    md = model_metadata(ARCH, hidden=hidden, n_layers=n_layers, ffn=ffn, n_heads=n_heads,
                        n_kv_heads=n_kv_heads, context_length=context_length, rope_theta=rope_theta,
                        rms_eps=rms_eps, head_dim=head_dim)
    md |= {a + K.K_KEY_LEN: head_dim, a + "attention.value_length": head_dim,
           a + K.K_EXPERTS: n_experts, a + K.K_EXPERTS_USED: n_experts_used, a + K.K_EXPERT_FFN: ffn,
           a + K.K_SLIDING_WINDOW: sliding_window}
    if yarn_factor > 1:
        md |= {a + K.K_ROPE_SCALING_TYPE: "yarn", a + K.K_ROPE_SCALING_FACTOR: float(yarn_factor),
               a + K.K_ROPE_SCALING_ORIG_CTX: yarn_orig_context}
    if tokenizer_metadata is None:
        tokenizer_metadata = synthetic_tokenizer_metadata(vocab_size, ARCH, seed)
    md |= dict(tokenizer_metadata) | dict(extra_metadata or {})
    return write_gguf(path, ARCH, md, shapes, plan, seed)


def synth_gpt_oss_like(out: str | Path, name: str, quant: str, seed: int,
                       preset: Mapping[str, Any]) -> tuple[Path, Counter]:
    """`orcd synth --like <gpt-oss preset>`: (path, {qtype name: tensor count}). quant: MXFP4 (experts
    MXFP4, rest Q8_0) or one GGML type for every matrix."""
    kw = {k: v for k, v in preset.items() if k not in ("arch", "quant")}
    shapes = gpt_oss_shapes(kw["vocab_size"], kw["hidden"], kw["n_layers"], kw["ffn"], kw["n_heads"],
                            kw["n_kv_heads"], kw["head_dim"], kw["n_experts"])
    try:
        plan = gpt_oss_qtypes(shapes, quant)
    except KeyError:
        raise ValueError(f"unknown quant {quant!r}: use MXFP4 or a GGML type name") from None
    md = {"general.name": f"orcd-synth-{name}-{quant}"}
    if quant.upper() == "MXFP4":
        md["general.file_type"] = int(LlamaFileType.MOSTLY_MXFP4_MOE)  # what llama.cpp's converter records
    path = write_gpt_oss_gguf(out, qtypes={"default": Q.F32} | plan, seed=seed, extra_metadata=md, **kw)
    return path, Counter(q.name for q in plan.values())
