"""GGUF quantized weights: one torch dequantizer per GGML type (registered by type, CPU and CUDA,
bit-exact to gguf.quants.dequantize), and the QuantLinear / QuantEmbedding modules built on them."""

from orcd.quant import floats, kquants, legacy, mxfp4  # noqa: F401  (register the dequantizers)
from orcd.quant.dequant import dequantize, dequantize_to
from orcd.quant.linear import QuantEmbedding, QuantLinear
from orcd.quant.registry import get_format, supported_qtypes

__all__ = ["QuantEmbedding", "QuantLinear", "dequantize", "dequantize_to", "get_format", "supported_qtypes"]
