"""gpt-oss (`gpt-oss` in GGUF, llama.cpp's LLM_ARCH_OPENAI_MOE): OpenAI's gpt-oss-20b / -120b.

Per layer: RMSNorm (attn_norm) -> attention -> residual add; RMSNorm (post_attention_norm) -> MoE FFN
-> residual add. Attention: GQA with Q/K/V/O biases, head_dim from attention.key_length (64, while
hidden / n_heads = 45 for 20b), scale 1/sqrt(head_dim), NeoX RoPE with YaRN scaling, and attention sinks
(blk.N.attn_sinks.weight [n_heads]: one learned logit per head in the softmax denominator). Layers
alternate: even layers attend to a sliding window of cfg.sliding_window (128) positions, odd layers to
the whole context (llama.cpp's default pattern 2). MoE: orcd/models/moe.py (router with bias, top-k,
softmax over the selected logits, clamped SwiGLU, expert biases; experts usually MXFP4). Untied head.

YaRN as gpt-oss defines it (HF rope_parameters truncate=false): the ramp bounds are not rounded to whole
dimensions; llama.cpp rounds them (floor/ceil), which moves a few mid frequencies slightly. With that
rounding swapped in, orcd equals llama.cpp to 5e-7 on an F32 file (scripts/gpt_oss_vs_llama_cpp.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from orcd.errors import GGUFError
from orcd.gguf.config import K_ROPE_BASE_SWA, ModelConfig
from orcd.gguf.reader import GGUFFile
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import Attention, AttnMetadata, paged_attention
from orcd.models.layers.linear import dense, embedding, linear
from orcd.models.layers.norm import RMSNorm
from orcd.models.moe import ExpertLinear, MoE, kernels_apply
from orcd.models.registry import register

Shape = tuple[int, ...]


def yarn_inv_freq(dim: int, theta: float, factor: float, orig_ctx: int, beta_fast: float, beta_slow: float,
                  truncate: bool = False) -> tuple[torch.Tensor, float]:
    """(inv_freq [dim / 2] float32, cos/sin magnitude scale): YaRN's blend of interpolated (/ factor) and
    original frequencies, ramping between the dimensions that turn beta_fast and beta_slow times over
    orig_ctx positions; computed on the CPU in float32 as HF transformers does."""
    pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)

    def corr_dim(rotations: float) -> float:  # the dimension that turns `rotations` times in orig_ctx
        return dim * math.log(orig_ctx / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1 - ramp  # 1: keep the original frequency (fast dims), 0: interpolate (slow dims)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolated) + (1.0 / pos_freqs) * extrapolated
    mscale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, mscale


class YarnRotary:
    """cos/sin for integer positions (same interface as layers.rotary.RotaryEmbedding), YaRN-scaled."""

    def __init__(self, cfg: ModelConfig, theta: float, device: torch.device):
        if cfg.rope_scaling_type not in ("yarn", "none"):
            raise GGUFError(f"gpt-oss: rope scaling type {cfg.rope_scaling_type!r} is not supported "
                            "(have: yarn)")
        factor = cfg.rope_scaling_factor if cfg.rope_scaling_type == "yarn" else 1.0
        orig = cfg.rope_orig_context or cfg.context_length
        inv_freq, self.mscale = yarn_inv_freq(cfg.rope_dim, theta, factor, orig, cfg.yarn_beta_fast,
                                              cfg.yarn_beta_slow)
        self.inv_freq = inv_freq.to(device)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] int64 -> cos, sin [T, 1, rope_dim] in `dtype`, both times the YaRN mscale."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, rope_dim / 2] fp32
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        return (emb.cos() * self.mscale).to(dtype), (emb.sin() * self.mscale).to(dtype)


class GptOssBlock(nn.Module):
    def __init__(self, attn_norm: RMSNorm, attn: Attention, ffn_norm: RMSNorm, moe: MoE, local: bool):
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.moe, self.local = attn_norm, attn, ffn_norm, moe, local

    def forward(self, x, rope, meta, k_cache, v_cache):
        """x [T, H]; rope = {local: (cos, sin)} for this step's positions."""
        cos, sin = rope[self.local]
        x = x + self.attn(self.attn_norm(x), cos, sin, meta, k_cache, v_cache)
        return x + self.moe(self.ffn_norm(x))

    def forward_fused(self, x, h, next_norm: RMSNorm, positions, rot: YarnRotary, meta, k_cache, v_cache):
        """Where the kernels apply: the residual adds fused with the next norms (decode_ops.add_rmsnorm, one
        program per row), RoPE with the KV write (fused_attention). x [T, H] the residual, updated in
        place; h = attn_norm(x) -> next_norm(x after the block)."""
        from orcd.quant.kernels.decode_ops import add_rmsnorm

        a = fused_attention(self.attn, h, positions, rot, meta, k_cache, v_cache)
        h = add_rmsnorm(a, x, self.ffn_norm.weight, self.ffn_norm.eps)  # x += a
        return add_rmsnorm(self.moe(h), x, next_norm.weight, next_norm.eps)  # x += moe


def fused_attention(attn: Attention, x: torch.Tensor, positions: torch.Tensor, rot: YarnRotary,
                    meta: AttnMetadata, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    """Attention.forward with RoPE and the KV write in one kernel (decode_ops.rope_and_write_kv: cos/sin
    of positions * inv_freq, rounded to the model dtype). YaRN's cos/sin magnitude (mscale) is folded
    into the softmax scale instead: q and k both carry it, so the scores carry mscale ** 2."""
    from orcd.quant.kernels.decode_ops import rope_and_write_kv

    t = x.shape[0]
    q = attn.q_proj(x).view(t, attn.n_heads, attn.head_dim)  # rotated in place
    k = attn.k_proj(x).view(t, attn.n_kv_heads, attn.head_dim)
    v = attn.v_proj(x).view(t, attn.n_kv_heads, attn.head_dim)
    rope_and_write_kv(q, k, v, positions, rot.inv_freq, k_cache, v_cache, meta.slot_mapping)
    scale = attn.scale * rot.mscale**2
    o = paged_attention(q, k_cache, v_cache, meta, scale, attn.window, attn.batch_invariant, attn.sinks)
    return attn.o_proj(o.reshape(t, attn.n_heads * attn.head_dim))


@register("gpt-oss")
class GptOssModel(nn.Module):
    fused_decode = False  # the runner's FusedDecoder implements the qwen2/llama block only
    moe_decode = True  # decode graphs may capture orcd/runner/fused_gpt_oss.py's GptOssDecoder instead

    @classmethod
    def expected_tensors(cls, cfg: ModelConfig) -> tuple[dict[str, Shape], dict[str, Shape]]:
        """(required, optional) tensor name -> torch-order shape ([out, in] for weights)."""
        if not 0 < cfg.n_experts_used <= cfg.n_experts or cfg.expert_ffn_size <= 0:
            raise GGUFError(f"gpt-oss needs expert_count, expert_used_count and expert_feed_forward_length "
                            f"(got {cfg.n_experts}, {cfg.n_experts_used}, {cfg.expert_ffn_size})")
        h, d, e, f = cfg.hidden_size, cfg.head_dim, cfg.n_experts, cfg.expert_ffn_size
        q, kv = cfg.n_heads * d, cfg.n_kv_heads * d
        req: dict[str, Shape] = {"token_embd.weight": (cfg.vocab_size, h), "output_norm.weight": (h,),
                                 "output.weight": (cfg.vocab_size, h)}
        opt: dict[str, Shape] = {}
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            req |= {
                p + "attn_norm.weight": (h,), p + "post_attention_norm.weight": (h,),
                p + "attn_q.weight": (q, h), p + "attn_k.weight": (kv, h), p + "attn_v.weight": (kv, h),
                p + "attn_output.weight": (h, q), p + "attn_output.bias": (h,),
                p + "attn_sinks.weight": (cfg.n_heads,),
                p + "ffn_gate_inp.weight": (e, h), p + "ffn_gate_inp.bias": (e,),
                p + "ffn_gate_exps.weight": (e, f, h), p + "ffn_gate_exps.bias": (e, f),
                p + "ffn_up_exps.weight": (e, f, h), p + "ffn_up_exps.bias": (e, f),
                p + "ffn_down_exps.weight": (e, h, f), p + "ffn_down_exps.bias": (e, h),
            }
            opt |= {p + "attn_q.bias": (q,), p + "attn_k.bias": (kv,), p + "attn_v.bias": (kv,)}
        return req, opt

    def __init__(self, cfg: ModelConfig, embed: nn.Module, blocks: list[GptOssBlock], norm: RMSNorm,
                 lm_head: nn.Module, rotary: dict[bool, YarnRotary]):
        super().__init__()
        self.cfg, self.embed, self.blocks, self.norm = cfg, embed, nn.ModuleList(blocks), norm
        self.lm_head, self.rotary = lm_head, rotary  # rotary: {is_local: YarnRotary}

    @classmethod
    def from_gguf(cls, f: GGUFFile, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> GptOssModel:
        device = torch.device(device)
        t = f.tensors
        # One RoPE for every layer, unless the file gives the local layers their own base (as llama.cpp)
        swa_theta = cfg.rope_theta_swa if f"{cfg.arch}.{K_ROPE_BASE_SWA}" in f.metadata else cfg.rope_theta
        full = YarnRotary(cfg, cfg.rope_theta, device)
        local = full if swa_theta == cfg.rope_theta else YarnRotary(cfg, swa_theta, device)
        rotary = {False: full, True: local}

        def lin(name: str) -> nn.Module:
            return linear(t[name + ".weight"], t.get(name + ".bias"), device, dtype, keep_quantized)

        def norm(name: str) -> RMSNorm:
            return RMSNorm(dense(t[name + ".weight"], device, dtype), cfg.rms_eps)

        def experts(name: str) -> ExpertLinear:
            return ExpertLinear(t[name + ".weight"], t[name + ".bias"], device, dtype)  # raw if quantized

        blocks = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            is_local = cfg.is_local(i)
            sinks = dense(t[p + "attn_sinks.weight"], device, torch.float32)  # [n_heads] logits
            attn = Attention(lin(p + "attn_q"), lin(p + "attn_k"), lin(p + "attn_v"), lin(p + "attn_output"),
                             cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                             window=cfg.sliding_window if is_local else 0, sinks=sinks)
            moe = MoE(lin(p + "ffn_gate_inp"), experts(p + "ffn_gate_exps"), experts(p + "ffn_up_exps"),
                      experts(p + "ffn_down_exps"), cfg.n_experts_used)
            ffn_norm = norm(p + "post_attention_norm")
            blocks.append(GptOssBlock(norm(p + "attn_norm"), attn, ffn_norm, moe, is_local))
        embed = embedding(t["token_embd.weight"], device, dtype, keep_quantized)
        return cls(cfg, embed, blocks, norm("output_norm"), lin("output"), rotary)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttnMetadata,
                kv: KVCache) -> torch.Tensor:
        """input_ids, positions [T] int64 (all sequences flattened) -> final-normed hidden [T, H]."""
        x = self.embed(input_ids)
        if kernels_apply(x.device) and self.cfg.rope_dim == self.cfg.head_dim:
            return self.forward_fused(x, positions, attn, kv)
        full = self.rotary[False].cos_sin(positions, x.dtype)
        local = self.rotary[True]
        rope = {False: full, True: full if local is self.rotary[False] else local.cos_sin(positions, x.dtype)}
        for i, block in enumerate(self.blocks):
            x = block(x, rope, attn, kv.k[i], kv.v[i])
        return self.norm(x)

    def forward_fused(self, x: torch.Tensor, positions: torch.Tensor, meta: AttnMetadata,
                      kv: KVCache) -> torch.Tensor:
        """forward() where the kernels apply: per layer 2 norm launches (the residual adds inside) instead
        of ~18, one RoPE + KV-write launch instead of ~9 (GptOssBlock.forward_fused)."""
        from orcd.quant.kernels.decode_ops import add_rmsnorm

        x = x.contiguous()  # the residual, updated in place from here
        first = self.blocks[0].attn_norm
        h = add_rmsnorm(None, x, first.weight, first.eps)
        nexts = [b.attn_norm for b in self.blocks[1:]] + [self.norm]
        for i, (block, nxt) in enumerate(zip(self.blocks, nexts, strict=True)):
            h = block.forward_fused(x, h, nxt, positions, self.rotary[block.local], meta, kv.k[i], kv.v[i])
        return h

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] (already normed) -> logits [N, V] float32."""
        return self.lm_head(hidden).float()
