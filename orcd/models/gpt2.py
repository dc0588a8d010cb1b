"""GPT-2 (`gpt2` in GGUF): learned position embeddings, pre-LayerNorm blocks (weight and bias), fused
Q/K/V with bias (split by rows at load), multi-head attention without rotary positions, GELU(tanh) MLP
with biases, final LayerNorm, output tied to the token embeddings unless the file has output.weight.
llama.cpp's converter stores HF's Conv1D weights transposed, as [out, in] like every other weight."""

from __future__ import annotations

import torch
from torch import nn

from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import Attention, AttnMetadata
from orcd.models.layers.linear import dense, embedding, linear, split_rows
from orcd.models.layers.mlp import GeluMLP
from orcd.models.layers.norm import LayerNorm
from orcd.models.registry import register

Shape = tuple[int, ...]


class GPT2Block(nn.Module):
    def __init__(self, attn_norm: LayerNorm, attn: Attention, ffn_norm: LayerNorm, mlp: GeluMLP):
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.mlp = attn_norm, attn, ffn_norm, mlp

    def forward(self, x, meta, k_cache, v_cache):
        x = x + self.attn(self.attn_norm(x), None, None, meta, k_cache, v_cache)
        return x + self.mlp(self.ffn_norm(x))


@register("gpt2")
class GPT2Model(nn.Module):
    fused_decode = False  # FusedDecoder runs RMSNorm + rotary blocks only

    @classmethod
    def expected_tensors(cls, cfg: ModelConfig) -> tuple[dict[str, Shape], dict[str, Shape]]:
        h, f, v = cfg.hidden_size, cfg.ffn_size, cfg.vocab_size
        req: dict[str, Shape] = {"token_embd.weight": (v, h), "position_embd.weight": (cfg.context_length, h),
                                 "output_norm.weight": (h,), "output_norm.bias": (h,)}
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            for name, shape in (("attn_norm", (h,)), ("attn_qkv", (3 * h, h)), ("attn_output", (h, h)),
                                ("ffn_norm", (h,)), ("ffn_up", (f, h)), ("ffn_down", (h, f))):
                req[p + name + ".weight"] = shape
                req[p + name + ".bias"] = shape[:1]
        return req, {"output.weight": (v, h)}

    def __init__(self, cfg: ModelConfig, embed: nn.Module, pos_embed: nn.Module, blocks: list[GPT2Block],
                 norm: LayerNorm, lm_head: nn.Module):
        super().__init__()
        self.cfg, self.embed, self.pos_embed, self.blocks = cfg, embed, pos_embed, nn.ModuleList(blocks)
        self.norm, self.lm_head = norm, lm_head

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> GPT2Model:
        device, t, h = torch.device(device), dict(f.tensors), cfg.hidden_size
        for i in range(cfg.n_layers):  # fused q/k/v rows (and bias) -> attn_q, attn_k, attn_v
            p = f"blk.{i}."
            for kind in ("weight", "bias"):
                names = [f"{p}attn_{x}.{kind}" for x in "qkv"]
                t |= split_rows(t.pop(f"{p}attn_qkv.{kind}"), names, [h] * 3)

        def lin(name: str) -> nn.Module:
            return linear(t[name + ".weight"], t.get(name + ".bias"), device, dtype, keep_quantized)

        def norm(name: str) -> LayerNorm:
            w, b = (dense(t[f"{name}.{k}"], device, dtype) for k in ("weight", "bias"))
            return LayerNorm(w, b, cfg.rms_eps)

        blocks = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            attn = Attention(lin(p + "attn_q"), lin(p + "attn_k"), lin(p + "attn_v"), lin(p + "attn_output"),
                             cfg.n_heads, cfg.n_heads, h // cfg.n_heads)
            mlp = GeluMLP(lin(p + "ffn_up"), lin(p + "ffn_down"))
            blocks.append(GPT2Block(norm(p + "attn_norm"), attn, norm(p + "ffn_norm"), mlp))
        embed = embedding(t["token_embd.weight"], device, dtype, keep_quantized)
        pos = embedding(t["position_embd.weight"], device, dtype, keep_quantized)
        head = lin("output") if "output.weight" in t else embed.as_linear()
        return cls(cfg, embed, pos, blocks, norm("output_norm"), head)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttnMetadata,
                kv: KVCache) -> torch.Tensor:
        """input_ids, positions [T] int64 (all sequences flattened) -> final-normed hidden [T, H]."""
        x = self.embed(input_ids) + self.pos_embed(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, attn, kv.k[i], kv.v[i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] (already normed) -> logits [N, V] float32."""
        return self.lm_head(hidden).float()
