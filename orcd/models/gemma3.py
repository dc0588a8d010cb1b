"""Gemma 3 (`gemma3` in GGUF): the text decoder of Gemma 3 270M ... 27B.

Per layer: RMSNorm -> attention -> RMSNorm (post) -> residual add; RMSNorm -> GELU(tanh)-gated FFN ->
RMSNorm (post) -> residual add. Attention has QK-norm (RMSNorm over head_dim before RoPE, NeoX halves,
rows not permuted). Layers are local (sliding window of cfg.sliding_window positions, RoPE base
cfg.rope_theta_swa, no RoPE scaling) or global (full causal, cfg.rope_theta with the file's scaling),
as cfg.swa_layers says (llama.cpp's default: every 6th layer global). Token embeddings are scaled by
sqrt(hidden); the output head is tied to them unless the file has output.weight.

llama.cpp's converter stores every Gemma norm weight as 1 + w (HF's Gemma3RMSNorm computes x * (1 + w)),
so the plain RMSNorm applies the file's weights as they are.
"""

from __future__ import annotations

import torch
from torch import nn

from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import Attention, AttnMetadata
from orcd.models.layers.linear import dense, embedding, linear
from orcd.models.layers.mlp import GeluGLU
from orcd.models.layers.norm import RMSNorm
from orcd.models.layers.rotary import RotaryEmbedding
from orcd.models.registry import register

Shape = tuple[int, ...]
_LAYER_TENSORS = ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")


def attention_scale(cfg: ModelConfig) -> float:
    """The file's attention.scale, else llama.cpp's rule: 1/sqrt(head_dim); the 62-layer 27B model was
    trained with query_pre_attn_scalar = hidden / n_heads instead."""
    if cfg.attn_scale > 0:
        return cfg.attn_scale
    return (cfg.hidden_size // cfg.n_heads) ** -0.5 if cfg.n_layers == 62 else cfg.head_dim**-0.5


class Gemma3Block(nn.Module):
    def __init__(self, norms: list[RMSNorm], attn: Attention, mlp: GeluGLU, local: bool):
        super().__init__()
        self.attn_norm, self.post_attn_norm, self.ffn_norm, self.post_ffn_norm = norms
        self.attn, self.mlp, self.local = attn, mlp, local

    def forward(self, x, rope, meta, k_cache, v_cache):
        """x [T, H]; rope = {local: (cos, sin)} for this step's positions."""
        cos, sin = rope[self.local]
        x = x + self.post_attn_norm(self.attn(self.attn_norm(x), cos, sin, meta, k_cache, v_cache))
        return x + self.post_ffn_norm(self.mlp(self.ffn_norm(x)))


@register("gemma3")
class Gemma3Model(nn.Module):
    fused_decode = False  # the runner's FusedDecoder implements the qwen2/llama block only
    qk_norm_decode = True  # the runner's QKNormDecoder (orcd/runner/fused_gemma3.py) runs this block

    @classmethod
    def expected_tensors(cls, cfg: ModelConfig) -> tuple[dict[str, Shape], dict[str, Shape]]:
        """(required, optional) tensor name -> torch-order shape ([out, in] for weights)."""
        h, d, f = cfg.hidden_size, cfg.head_dim, cfg.ffn_size
        q, kv = cfg.n_heads * d, cfg.n_kv_heads * d
        req: dict[str, Shape] = {"token_embd.weight": (cfg.vocab_size, h), "output_norm.weight": (h,)}
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            req |= {p + n + ".weight": (h,) for n in _LAYER_TENSORS}
            req |= {
                p + "attn_q.weight": (q, h), p + "attn_k.weight": (kv, h), p + "attn_v.weight": (kv, h),
                p + "attn_output.weight": (h, q), p + "attn_q_norm.weight": (d,),
                p + "attn_k_norm.weight": (d,), p + "ffn_gate.weight": (f, h), p + "ffn_up.weight": (f, h),
                p + "ffn_down.weight": (h, f),
            }
        return req, {"output.weight": (cfg.vocab_size, h)}

    def __init__(self, cfg: ModelConfig, embed: nn.Module, blocks: list[Gemma3Block], norm: RMSNorm,
                 lm_head: nn.Module, rotary: dict[bool, RotaryEmbedding]):
        super().__init__()
        self.cfg, self.embed, self.blocks, self.norm = cfg, embed, nn.ModuleList(blocks), norm
        self.lm_head, self.rotary = lm_head, rotary  # rotary: {is_local: RotaryEmbedding}
        self._embed_scale: dict[torch.dtype, float] = {}  # sqrt(hidden) rounded to each dtype, as HF

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> Gemma3Model:
        device = torch.device(device)
        t = f.tensors
        rotary = {  # fails on an unsupported scaling type before any weight is read
            False: RotaryEmbedding(cfg.rope_dim, cfg.rope_theta, cfg.rope_scaling_type,
                                   cfg.rope_scaling_factor, device),
            True: RotaryEmbedding(cfg.rope_dim, cfg.rope_theta_swa, device=device),
        }

        def lin(name: str) -> nn.Module:
            return linear(t[name + ".weight"], t.get(name + ".bias"), device, dtype, keep_quantized)

        def norm(name: str) -> RMSNorm:
            return RMSNorm(dense(t[name + ".weight"], device, dtype), cfg.rms_eps)

        scale = attention_scale(cfg)
        blocks = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            local = cfg.is_local(i)
            attn = Attention(lin(p + "attn_q"), lin(p + "attn_k"), lin(p + "attn_v"), lin(p + "attn_output"),
                             cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, q_norm=norm(p + "attn_q_norm"),
                             k_norm=norm(p + "attn_k_norm"), scale=scale,
                             window=cfg.sliding_window if local else 0)
            mlp = GeluGLU(lin(p + "ffn_gate"), lin(p + "ffn_up"), lin(p + "ffn_down"))
            blocks.append(Gemma3Block([norm(p + n) for n in _LAYER_TENSORS], attn, mlp, local))
        embed = embedding(t["token_embd.weight"], device, dtype, keep_quantized)
        head = lin("output") if "output.weight" in t else embed.as_linear()
        return cls(cfg, embed, blocks, norm("output_norm"), head, rotary)

    def embed_scale(self, dtype: torch.dtype) -> float:
        """sqrt(hidden) rounded to `dtype` (HF multiplies the embeddings by it as a tensor of that dtype)."""
        if dtype not in self._embed_scale:
            self._embed_scale[dtype] = float(torch.tensor(self.cfg.hidden_size**0.5, dtype=dtype))
        return self._embed_scale[dtype]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttnMetadata,
                kv: KVCache) -> torch.Tensor:
        """input_ids, positions [T] int64 (all sequences flattened) -> final-normed hidden [T, H]."""
        x = self.embed(input_ids)
        x = x * self.embed_scale(x.dtype)
        rope = {local: r.cos_sin(positions, x.dtype) for local, r in self.rotary.items()}
        for i, block in enumerate(self.blocks):
            x = block(x, rope, attn, kv.k[i], kv.v[i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] (already normed) -> logits [N, V] float32 (soft-capped if the file says so)."""
        logits = self.lm_head(hidden).float()
        cap = self.cfg.final_logit_softcap
        return cap * torch.tanh(logits / cap) if cap > 0 else logits
