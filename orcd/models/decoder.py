"""The decoder-only transformer shared by qwen2, qwen3 and llama: pre-norm blocks of GQA attention + SwiGLU.

Architecture files subclass `DecoderModel` and set class attributes:
- `qkv_bias`: attn_{q,k,v}.bias are required (qwen2); otherwise they are loaded only when present;
- `qk_rows_permuted`: attn_q/attn_k rows are stored permuted for interleaved RoPE (llama);
- `qk_norm`: attn_q_norm / attn_k_norm RMSNorm over head_dim before RoPE (qwen3);
- `fused_decode`: the runner's FusedDecoder may run the model (it knows no QK-norm).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile, GGUFTensor
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import Attention, AttnMetadata
from orcd.models.layers.linear import dense, embedding, linear
from orcd.models.layers.mlp import SwiGLU
from orcd.models.layers.norm import RMSNorm
from orcd.models.layers.rotary import RotaryEmbedding

Shape = tuple[int, ...]


def unpermute_qk_rows(t: GGUFTensor, n_heads: int) -> GGUFTensor:
    """Undo llama.cpp's convert-time Q/K row permutation (interleaved -> NeoX halves).

    Rows are quantized independently, so permuting the raw [rows, row_bytes] blocks is exact.
    """
    rows = t.shape[0]
    dim = rows // n_heads // 2
    order = np.arange(rows).reshape(n_heads, dim, 2).swapaxes(1, 2).reshape(-1)
    data = t.data.reshape(rows, -1)[order].reshape(t.data.shape)  # same layout as the file's
    return dataclasses.replace(t, data=np.ascontiguousarray(data))


class Block(nn.Module):
    def __init__(self, attn_norm: RMSNorm, attn: Attention, ffn_norm: RMSNorm, mlp: SwiGLU):
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.mlp = attn_norm, attn, ffn_norm, mlp

    def forward(self, x, cos, sin, meta, k_cache, v_cache):
        x = x + self.attn(self.attn_norm(x), cos, sin, meta, k_cache, v_cache)
        return x + self.mlp(self.ffn_norm(x))


class DecoderModel(nn.Module):
    architecture = "?"
    qkv_bias = False
    qk_rows_permuted = False
    qk_norm = False
    fused_decode = True

    @classmethod
    def expected_tensors(cls, cfg: ModelConfig) -> tuple[dict[str, Shape], dict[str, Shape]]:
        """(required, optional) tensor name -> torch-order shape ([out, in] for weights)."""
        h, d, f = cfg.hidden_size, cfg.head_dim, cfg.ffn_size
        q, kv = cfg.n_heads * d, cfg.n_kv_heads * d
        req: dict[str, Shape] = {"token_embd.weight": (cfg.vocab_size, h), "output_norm.weight": (h,)}
        opt: dict[str, Shape] = {
            "output.weight": (cfg.vocab_size, h), "rope_freqs.weight": (cfg.rope_dim // 2,),
        }
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            req |= {
                p + "attn_norm.weight": (h,), p + "attn_q.weight": (q, h), p + "attn_k.weight": (kv, h),
                p + "attn_v.weight": (kv, h), p + "attn_output.weight": (h, q), p + "ffn_norm.weight": (h,),
                p + "ffn_gate.weight": (f, h), p + "ffn_up.weight": (f, h), p + "ffn_down.weight": (h, f),
            }
            if cls.qk_norm:
                req |= {p + "attn_q_norm.weight": (d,), p + "attn_k_norm.weight": (d,)}
            biases = {p + "attn_q.bias": (q,), p + "attn_k.bias": (kv,), p + "attn_v.bias": (kv,)}
            (req if cls.qkv_bias else opt).update(biases)  # loaded whenever present
        return req, opt

    def __init__(self, cfg: ModelConfig, embed: nn.Module, blocks: list[Block], norm: RMSNorm,
                 lm_head: nn.Module, rotary: RotaryEmbedding):
        super().__init__()
        self.cfg, self.embed, self.blocks, self.norm = cfg, embed, nn.ModuleList(blocks), norm
        self.lm_head, self.rotary = lm_head, rotary

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> DecoderModel:
        device = torch.device(device)
        t = f.tensors
        factors = dense(t["rope_freqs.weight"], device, torch.float32) if "rope_freqs.weight" in t else None
        rotary = RotaryEmbedding(cfg.rope_dim, cfg.rope_theta, cfg.rope_scaling_type,  # fails before weights
                                 cfg.rope_scaling_factor, device, factors)

        def lin(name: str, permute_heads: int = 0) -> nn.Module:
            w, b = t[name + ".weight"], t.get(name + ".bias")
            if permute_heads:
                w = unpermute_qk_rows(w, permute_heads)
                b = unpermute_qk_rows(b, permute_heads) if b is not None else None
            return linear(w, b, device, dtype, keep_quantized)

        def norm(name: str) -> RMSNorm:
            return RMSNorm(dense(t[name], device, dtype), cfg.rms_eps)

        qh = cfg.n_heads if cls.qk_rows_permuted else 0
        kh = cfg.n_kv_heads if cls.qk_rows_permuted else 0
        blocks = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            qk_norms = {"q_norm": norm(p + "attn_q_norm.weight"),
                        "k_norm": norm(p + "attn_k_norm.weight")} if cls.qk_norm else {}
            attn = Attention(lin(p + "attn_q", qh), lin(p + "attn_k", kh), lin(p + "attn_v"),
                             lin(p + "attn_output"), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, **qk_norms)
            mlp = SwiGLU(lin(p + "ffn_gate"), lin(p + "ffn_up"), lin(p + "ffn_down"))
            blocks.append(Block(norm(p + "attn_norm.weight"), attn, norm(p + "ffn_norm.weight"), mlp))
        embed = embedding(t["token_embd.weight"], device, dtype, keep_quantized)
        head = lin("output") if "output.weight" in t else embed.as_linear()
        return cls(cfg, embed, blocks, norm("output_norm.weight"), head, rotary)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttnMetadata,
                kv: KVCache) -> torch.Tensor:
        """input_ids, positions [T] int64 (all sequences flattened) -> final-normed hidden [T, H]."""
        x = self.embed(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attn, kv.k[i], kv.v[i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] (already normed) -> logits [N, V] float32."""
        return self.lm_head(hidden).float()
