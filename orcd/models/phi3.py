"""Phi-3 (`phi3` in GGUF): the shared decoder with fused tensors, split at load time.

The file holds attn_qkv [q + k + v rows, hidden] and ffn_up [gate rows + up rows, hidden] (HF's
qkv_proj and gate_up_proj, gate first). GGUF quantizes each row on its own, so slicing the raw
[rows, row_bytes] blocks gives the separate q/k/v and gate/up weights exactly; the model is then the
shared decoder (NeoX RoPE, no biases, untied head).

LongRoPE (the 128k models: tensors rope_factors_long/short, [rope_dim / 2] each): the rotary frequencies
are divided by one of the two factor vectors, the long one when the model's context (context_length)
exceeds rope.scaling.original_context_length (llama.cpp picks by its context size the same way; HF by the
sequence's length), and q.k is scaled by attn_factor**2, attn_factor multiplying both rotations as in
llama.cpp and HF: rope.scaling.attn_factor, else sqrt(1 + ln(s) / ln(original)) with s = context_length /
original (1 when s <= 1), HF's and llama.cpp's converter's rule.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from orcd.errors import GGUFError
from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile
from orcd.models.decoder import DecoderModel, Shape
from orcd.models.layers.linear import split_rows
from orcd.models.registry import register


@register("phi3")
class Phi3Model(DecoderModel):
    qkv_bias = False
    qk_rows_permuted = False

    @classmethod
    def expected_tensors(cls, cfg: ModelConfig) -> tuple[dict[str, Shape], dict[str, Shape]]:
        """The file's names: fused attn_qkv and ffn_up in place of attn_{q,k,v} and ffn_{gate,up}."""
        req, opt = super().expected_tensors(cfg)
        h, f = cfg.hidden_size, cfg.ffn_size
        qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            for n in ("attn_q", "attn_k", "attn_v", "ffn_gate"):
                req.pop(p + n + ".weight")
                opt.pop(p + n + ".bias", None)
            req[p + "attn_qkv.weight"], req[p + "ffn_up.weight"] = (qkv, h), (2 * f, h)
        opt["rope_factors_long.weight"] = opt["rope_factors_short.weight"] = (cfg.rope_dim // 2,)  # LongRoPE
        return req, opt

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> Phi3Model:
        q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        tensors = dict(f.tensors)
        attn_factor = longrope(tensors, cfg, f.metadata)
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            qkv = tensors.pop(p + "attn_qkv.weight")
            names = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
            tensors |= split_rows(qkv, names, [q, kv, kv])
            gate_up = tensors.pop(p + "ffn_up.weight")
            tensors |= split_rows(gate_up, [p + "ffn_gate.weight", p + "ffn_up.weight"], [cfg.ffn_size] * 2)
        model = super().from_gguf(dataclasses.replace(f, tensors=tensors), cfg, device, dtype, keep_quantized)
        for block in model.blocks:  # both rotations times attn_factor: q.k times its square
            block.attn.scale *= attn_factor**2
        return model


def longrope(tensors: dict, cfg: ModelConfig, metadata: dict) -> float:
    """Put the LongRoPE factor vector in use as rope_freqs.weight (the decoder divides the frequencies by
    it) and drop both from `tensors`; returns attn_factor (1.0 for a file without LongRoPE)."""
    long, short = "rope_factors_long.weight", "rope_factors_short.weight"
    if long not in tensors and short not in tensors:
        return 1.0
    if long not in tensors or short not in tensors or "rope_freqs.weight" in tensors:
        raise GGUFError("phi3 LongRoPE needs rope_factors_long and rope_factors_short (and no rope_freqs)")
    orig = cfg.rope_orig_context
    if orig <= 1:
        raise GGUFError("phi3 LongRoPE needs phi3.rope.scaling.original_context_length")
    s = cfg.context_length / orig
    tensors["rope_freqs.weight"] = tensors.pop(long) if s > 1 else tensors.pop(short)
    tensors.pop(long, None)
    tensors.pop(short, None)
    given = metadata.get(f"{cfg.arch}.rope.scaling.attn_factor")
    if given is not None:
        return float(given)
    return math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1 else 1.0
