"""Phi-3 (`phi3` in GGUF): the shared decoder with fused tensors, split at load time.

The file holds attn_qkv [q + k + v rows, hidden] and ffn_up [gate rows + up rows, hidden] (HF's
qkv_proj and gate_up_proj, gate first). GGUF quantizes each row on its own, so slicing the raw
[rows, row_bytes] blocks gives the separate q/k/v and gate/up weights exactly; the model is then the
shared decoder (NeoX RoPE, no biases, untied head). LongRoPE files (rope_factors_long/short tensors,
the 128k models) are refused by name.
"""

from __future__ import annotations

import dataclasses

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
        return req, opt

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> Phi3Model:
        if "rope_factors_long.weight" in f.tensors or "rope_factors_short.weight" in f.tensors:
            raise GGUFError("phi3 with LongRoPE (rope_factors_long/short, the 128k models) is not supported")
        q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        tensors = dict(f.tensors)
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            qkv = tensors.pop(p + "attn_qkv.weight")
            names = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
            tensors |= split_rows(qkv, names, [q, kv, kv])
            gate_up = tensors.pop(p + "ffn_up.weight")
            tensors |= split_rows(gate_up, [p + "ffn_gate.weight", p + "ffn_up.weight"], [cfg.ffn_size] * 2)
        return super().from_gguf(dataclasses.replace(f, tensors=tensors), cfg, device, dtype, keep_quantized)
