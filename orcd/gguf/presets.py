"""Model shapes for `orcd synth --like NAME` and llama.cpp-like per-tensor quant type plans."""

from __future__ import annotations

from collections.abc import Mapping

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType

PRESETS: dict[str, dict] = {
    # Exact shapes of Qwen2.5-0.5B-Instruct (tied embeddings).
    "qwen2.5-0.5b": dict(arch="qwen2", vocab_size=151936, hidden=896, n_layers=24, ffn=4864, n_heads=14,
                         n_kv_heads=2, context_length=32768, tied=True, rope_theta=1e6, quant="Q4_K_M"),
    # Exact shapes of Qwen2.5-7B-Instruct (untied): every width is a multiple of 256, so real K-quants.
    "qwen2.5-7b": dict(arch="qwen2", vocab_size=152064, hidden=3584, n_layers=28, ffn=18944, n_heads=28,
                       n_kv_heads=4, context_length=32768, tied=False, rope_theta=1e6, quant="Q4_K_M"),
    # Exact shapes of Qwen2.5-72B-Instruct (untied). FFN 29568 = 115.5 x 256: ffn_down rows fall back to
    # Q5_0 / Q8_0 like llama.cpp's; Q4_K_M is about 47 GB (for tensor parallelism over 2-4 GPUs).
    "qwen2.5-72b": dict(arch="qwen2", vocab_size=152064, hidden=8192, n_layers=80, ffn=29568, n_heads=64,
                        n_kv_heads=8, context_length=32768, tied=False, rope_theta=1e6, quant="Q4_K_M"),
    # Exact shapes of gpt-oss-20b (ggml-org's MXFP4 file: experts MXFP4, router F32, the rest Q8_0; ~12 GB).
    "gpt-oss-20b": dict(arch="gpt-oss", vocab_size=201088, hidden=2880, n_layers=24, ffn=2880, n_heads=64,
                        n_kv_heads=8, head_dim=64, n_experts=32, n_experts_used=4, sliding_window=128,
                        context_length=131072, tied=False, rope_theta=150000.0, yarn_factor=32.0,
                        yarn_orig_context=4096, quant="MXFP4"),
    # Exact shapes of Gemma 3 270M (tied; head_dim 256 != hidden / heads; 5 of 6 layers slide over 512).
    "gemma3-270m": dict(arch="gemma3", vocab_size=262144, hidden=640, n_layers=18, ffn=2048, n_heads=4,
                        n_kv_heads=1, head_dim=256, context_length=32768, tied=True, rope_theta=1e6,
                        rms_eps=1e-6, quant="Q4_K_M", metadata={"gemma3.attention.sliding_window": 512}),
    # Tiny models for tests (seconds to write, milliseconds to run).
    "tiny-qwen2": dict(arch="qwen2", vocab_size=1024, hidden=64, n_layers=2, ffn=128, n_heads=4,
                       n_kv_heads=2, context_length=2048, tied=True, rope_theta=1e6, quant="F32"),
    "tiny-llama": dict(arch="llama", vocab_size=1024, hidden=64, n_layers=2, ffn=128, n_heads=4,
                       n_kv_heads=2, context_length=2048, tied=False, rope_theta=5e5, quant="F32"),
    # Tiny but 256-wide, so every type (K-quants included) applies.
    "tiny-qwen2-256": dict(arch="qwen2", vocab_size=1024, hidden=256, n_layers=2, ffn=512, n_heads=4,
                           n_kv_heads=2, context_length=2048, tied=False, rope_theta=1e6, quant="Q4_K_M"),
    "tiny-gpt-oss": dict(arch="gpt-oss", vocab_size=1024, hidden=64, n_layers=2, ffn=64, n_heads=4,
                         n_kv_heads=2, head_dim=32, n_experts=4, n_experts_used=2, sliding_window=8,
                         context_length=8192, tied=False, rope_theta=150000.0, yarn_factor=32.0,
                         yarn_orig_context=256, quant="MXFP4"),
}

# llama.cpp's substitutes when a row is not a whole number of 256-element super-blocks.
K_FALLBACK = {Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}


def fits(qtype: Q, row_len: int) -> bool:
    return row_len % GGML_QUANT_SIZES[qtype][0] == 0


def _with_fallback(qtype: Q, row_len: int) -> Q:
    if fits(qtype, row_len):
        return qtype
    alt = K_FALLBACK.get(qtype, Q.F16)
    return alt if fits(alt, row_len) else Q.F16


def _more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's use_more_bits: first and last eighth of the layers, and every third one between."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def _q4_k_m(name: str, tied: bool, n_layers: int) -> Q:
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return Q.Q6_K
    if name.startswith("blk.") and (".attn_v." in name or ".ffn_down." in name):
        return Q.Q6_K if _more_bits(int(name.split(".")[1]), n_layers) else Q.Q4_K
    return Q.Q4_K


def plan_qtypes(shapes: Mapping[str, tuple[int, ...]], quant: str, n_layers: int) -> dict[str, Q]:
    """Exact tensor name -> type for a "file type": Q4_K_M or any single GGML type name (F16, Q8_0, Q6_K...).
    K-quant choices fall back like llama.cpp does where the row width is not a multiple of 256."""
    tied = "output.weight" not in shapes
    out: dict[str, Q] = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            continue  # norms and biases: F32 by the synth rule
        if quant.upper() == "Q4_K_M":
            qtype = _q4_k_m(name, tied, n_layers)
        else:
            try:
                qtype = Q[quant.upper()]
            except KeyError:
                raise ValueError(f"unknown quant {quant!r}: use Q4_K_M or a GGML type name") from None
        out[name] = _with_fallback(qtype, shape[-1])
    return out
