"""Llama 2/3 and Mistral (`llama` in GGUF): no biases; Q/K rows stored permuted for interleaved RoPE."""

from orcd.models.decoder import DecoderModel
from orcd.models.registry import register


@register("llama")
class LlamaModel(DecoderModel):
    qkv_bias = False
    qk_rows_permuted = True
