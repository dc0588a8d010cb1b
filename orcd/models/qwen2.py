"""Qwen2 (and Qwen2.5): Q/K/V biases, NeoX RoPE, GQA, SwiGLU, RMSNorm, tied or untied head."""

from orcd.models.decoder import DecoderModel
from orcd.models.registry import register


@register("qwen2")
class Qwen2Model(DecoderModel):
    qkv_bias = True
    qk_rows_permuted = False
