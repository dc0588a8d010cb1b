"""Qwen3 (dense): no Q/K/V biases, RMSNorm over head_dim on Q and K before RoPE (QK-norm), NeoX RoPE,
head_dim from the file (attention.key_length: 128 while hidden / n_heads is 64 for Qwen3-0.6B)."""

from orcd.models.decoder import DecoderModel
from orcd.models.registry import register


@register("qwen3")
class Qwen3Model(DecoderModel):
    qkv_bias = False
    qk_rows_permuted = False
    qk_norm = True
    fused_decode = False  # FusedDecoder has no QK-norm
    qk_norm_decode = True  # the runner's QKNormDecoder (orcd/runner/fused_gemma3.py) runs this block
