"""GGUF metadata -> one frozen ModelConfig. Metadata key names live here, once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orcd.errors import GGUFError
from orcd.gguf.reader import GGUFFile

# Keys under the architecture's prefix: f"{arch}.{key}".
K_CONTEXT = "context_length"
K_EMBED = "embedding_length"
K_BLOCKS = "block_count"
K_FFN = "feed_forward_length"
K_HEADS = "attention.head_count"
K_KV_HEADS = "attention.head_count_kv"
K_KEY_LEN = "attention.key_length"
K_RMS_EPS = "attention.layer_norm_rms_epsilon"
K_NORM_EPS = "attention.layer_norm_epsilon"  # LayerNorm models (gpt2)
K_ROPE_BASE = "rope.freq_base"
K_ROPE_DIM = "rope.dimension_count"
K_ROPE_SCALING_TYPE = "rope.scaling.type"
K_ROPE_SCALING_FACTOR = "rope.scaling.factor"
K_ROPE_SCALING_ORIG_CTX = "rope.scaling.original_context_length"
K_VOCAB = "vocab_size"
K_SLIDING_WINDOW = "attention.sliding_window"
K_SWA_PATTERN = "attention.sliding_window_pattern"  # int n (every n-th layer global) or bool per layer
K_ROPE_BASE_SWA = "rope.freq_base_swa"
K_ATTN_SCALE = "attention.scale"
K_FINAL_SOFTCAP = "final_logit_softcapping"
K_EXPERTS = "expert_count"
K_EXPERTS_USED = "expert_used_count"
K_EXPERT_FFN = "expert_feed_forward_length"
K_YARN_BETA_FAST = "rope.scaling.yarn_beta_fast"
K_YARN_BETA_SLOW = "rope.scaling.yarn_beta_slow"

# llama.cpp's per-architecture defaults for sliding-window models, used when the file has no key:
# arch -> (layer pattern n: layer i is local unless i % n == n - 1; RoPE base of the local layers)
SWA_DEFAULTS = {"gemma3": (6, 10000.0), "gpt-oss": (2, 10000.0)}  # gpt-oss: even layers local


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    context_length: int
    hidden_size: int
    n_layers: int
    ffn_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    rope_dim: int  # rotary dimensions per head (== head_dim for qwen2/llama)
    rope_scaling_type: str  # "none" | "linear" | "yarn" | ...
    rope_scaling_factor: float
    rope_orig_context: int
    rms_eps: float  # the norm's epsilon: RMSNorm's, or LayerNorm's for the LayerNorm models
    tied_embeddings: bool  # True when the file has no output.weight (LM head = token_embd)
    sliding_window: int = 0  # local layers attend to the last `sliding_window` positions; 0 = none
    swa_layers: tuple[bool, ...] = ()  # per layer: True = local (sliding-window) layer
    rope_theta_swa: float = 10000.0  # RoPE base of the local layers
    attn_scale: float = 0.0  # softmax scale from the file; 0 = the architecture's default
    final_logit_softcap: float = 0.0  # logits = cap * tanh(logits / cap) when > 0
    n_experts: int = 0  # mixture-of-experts FFN: experts per layer (0 = dense FFN)
    n_experts_used: int = 0  # experts routed per token (top-k)
    expert_ffn_size: int = 0  # intermediate width of one expert
    yarn_beta_fast: float = 32.0  # YaRN ramp bounds, in rotations (llama.cpp's and HF's defaults)
    yarn_beta_slow: float = 1.0

    def is_local(self, layer: int) -> bool:
        return bool(self.swa_layers) and self.swa_layers[layer]


def _get(md: dict[str, Any], key: str, kind: type, default: Any = None, required: bool = True) -> Any:
    if key not in md:
        if required:
            raise GGUFError(f"missing metadata key {key}")
        return default
    value = md[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise GGUFError(f"metadata key {key} has type {type(value).__name__}, expected {kind.__name__}")
    return value


def model_config_from_gguf(f: GGUFFile) -> ModelConfig:
    md, arch = f.metadata, f.architecture

    def get(key: str, kind: type, default: Any = None, required: bool = True) -> Any:
        return _get(md, f"{arch}.{key}", kind, default, required)

    hidden = get(K_EMBED, int)
    n_heads = get(K_HEADS, int)
    if n_heads <= 0 or hidden <= 0 or hidden % n_heads:
        raise GGUFError(f"{arch}.{K_HEADS}={n_heads} does not divide {arch}.{K_EMBED}={hidden}")
    head_dim = get(K_KEY_LEN, int, hidden // n_heads, required=False)
    n_kv = get(K_KV_HEADS, int, n_heads, required=False)
    if n_kv <= 0 or n_heads % n_kv:
        raise GGUFError(f"{arch}.{K_KV_HEADS}={n_kv} must divide {arch}.{K_HEADS}={n_heads}")
    embd = f.tensors.get("token_embd.weight")
    vocab = get(K_VOCAB, int, None, required=False)
    if vocab is None:
        tokens = md.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if isinstance(tokens, list) else (embd.shape[0] if embd else None)
    if not vocab:
        raise GGUFError(f"cannot tell the vocabulary size: no {arch}.{K_VOCAB} and no tokenizer.ggml.tokens")
    cfg = ModelConfig(
        arch=arch,
        vocab_size=int(vocab),
        context_length=get(K_CONTEXT, int),
        hidden_size=hidden,
        n_layers=get(K_BLOCKS, int),
        ffn_size=get(K_FFN, int),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        rope_theta=get(K_ROPE_BASE, float, 10000.0, required=False),
        rope_dim=get(K_ROPE_DIM, int, head_dim, required=False),
        rope_scaling_type=get(K_ROPE_SCALING_TYPE, str, "none", required=False),
        rope_scaling_factor=get(K_ROPE_SCALING_FACTOR, float, 1.0, required=False),
        rope_orig_context=get(K_ROPE_SCALING_ORIG_CTX, int, 0, required=False),
        rms_eps=get(K_RMS_EPS, float, get(K_NORM_EPS, float, 1e-6, required=False), required=False),
        tied_embeddings="output.weight" not in f.tensors,
        **_swa_fields(md, arch, get(K_BLOCKS, int)),
        attn_scale=get(K_ATTN_SCALE, float, 0.0, required=False),
        final_logit_softcap=get(K_FINAL_SOFTCAP, float, 0.0, required=False),
        n_experts=get(K_EXPERTS, int, 0, required=False),
        n_experts_used=get(K_EXPERTS_USED, int, 0, required=False),
        expert_ffn_size=get(K_EXPERT_FFN, int, 0, required=False),
        yarn_beta_fast=get(K_YARN_BETA_FAST, float, 32.0, required=False),
        yarn_beta_slow=get(K_YARN_BETA_SLOW, float, 1.0, required=False),
    )
    _check_ranges(cfg, len(f.tensors))
    return cfg


def _swa_fields(md: dict[str, Any], arch: str, n_layers: int) -> dict[str, Any]:
    """sliding_window, swa_layers, rope_theta_swa: the keys, else llama.cpp's defaults for the arch."""
    window = _get(md, f"{arch}.{K_SLIDING_WINDOW}", int, 0, required=False)
    pattern, theta = SWA_DEFAULTS.get(arch, (0, 10000.0))
    theta = _get(md, f"{arch}.{K_ROPE_BASE_SWA}", float, theta, required=False)
    raw = md.get(f"{arch}.{K_SWA_PATTERN}", pattern)
    if window <= 0:
        return {"sliding_window": 0, "swa_layers": (), "rope_theta_swa": theta}
    if isinstance(raw, list):
        if len(raw) != n_layers:
            raise GGUFError(f"{arch}.{K_SWA_PATTERN} has {len(raw)} entries for {n_layers} layers")
        layers = tuple(bool(x) for x in raw)
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        layers = tuple(raw == 0 or i % raw < raw - 1 for i in range(n_layers))  # as llama.cpp's
    else:
        raise GGUFError(f"{arch}.{K_SWA_PATTERN} must be a layer count or a bool per layer")
    return {"sliding_window": window, "swa_layers": layers, "rope_theta_swa": theta}


# Upper bounds far above any real model: they stop a crafted header from sizing loops and buffers.
MAX_DIM = 1 << 20  # hidden, ffn
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 27
MAX_HEAD_DIM = 1 << 14
MAX_EXPERTS = 1 << 12


def _check_ranges(cfg: ModelConfig, n_tensors: int) -> None:
    limits = {"context_length": MAX_CONTEXT, "n_layers": 1 << 16, "ffn_size": MAX_DIM,
              "hidden_size": MAX_DIM, "vocab_size": MAX_VOCAB, "head_dim": MAX_HEAD_DIM,
              "n_heads": cfg.hidden_size, "rope_dim": cfg.head_dim}
    for name, limit in limits.items():
        value = getattr(cfg, name)
        if not 0 < value <= limit:
            raise GGUFError(f"metadata gives {name}={value}, outside 1..{limit}")
    if cfg.n_layers > n_tensors:
        raise GGUFError(f"metadata gives {cfg.n_layers} layers, but the file holds only {n_tensors} tensors")
    if cfg.rope_dim % 2:
        raise GGUFError(f"metadata gives rope_dim={cfg.rope_dim}, which must be even")
    if not (0 <= cfg.sliding_window <= MAX_CONTEXT and 0 <= cfg.attn_scale < 1e3
            and 0 <= cfg.final_logit_softcap < 1e6):
        raise GGUFError("metadata gives a sliding window, attention scale or logit cap out of range")
    if not (0 <= cfg.n_experts_used <= cfg.n_experts <= MAX_EXPERTS and 0 <= cfg.expert_ffn_size <= MAX_DIM):
        raise GGUFError(f"metadata gives {cfg.n_experts_used} of {cfg.n_experts} experts of width "
                        f"{cfg.expert_ffn_size}: outside 0 <= used <= count <= {MAX_EXPERTS}")
    for name in ("rope_theta", "rope_scaling_factor", "rope_theta_swa", "yarn_beta_fast", "yarn_beta_slow"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value > 0):
            raise GGUFError(f"metadata gives {name}={value}, which must be a positive number")
    if not (math.isfinite(cfg.rms_eps) and 0 < cfg.rms_eps < 1):
        raise GGUFError(f"metadata gives rms_eps={cfg.rms_eps}, outside (0, 1)")
    if cfg.rope_orig_context < 0:
        raise GGUFError(f"metadata gives rope_orig_context={cfg.rope_orig_context}, which is negative")
