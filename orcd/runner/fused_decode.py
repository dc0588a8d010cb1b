"""A decode-only forward over the model's own weights with fused kernels (one token per sequence).

Same function as `model.forward` + `compute_logits` for steps where every sequence has one new token,
in 7 kernels per layer instead of ~40 (fuse_norm, batches <= 4, or <= I8_MAX_ROWS when every product
runs on the int8 GEMVs): one launch for the q, k, v GEMVs (RMSNorm and bias fused), RoPE + KV write,
split-K attention (2), o GEMV (+ residual), gate/up/SiLU GEMV (RMSNorm fused), down GEMV (+ residual).
Otherwise 11: add+RMSNorm kernels stand alone.
With int8_x on Q4_K/Q6_K weights (the default for bf16/fp16 models) also 11: the GEMVs read x quantized
to int8 per 32 by a small kernel before q/k/v (with the RMSNorm), o, gate/up (RMSNorm) and down; fewer
instructions per weight pay for the 4 extra launches (docs/performance.md, 7B).
Meant to be captured by `DecodeGraphs(step_fn=FusedDecoder(model))`. Models it cannot run raise
ValueError at construction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.quant.kernels import get_fused_linear
from orcd.quant.kernels.decode_ops import add_rmsnorm, rope_and_write_kv
from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_gemv, fused_glu, fused_linear
from orcd.quant.kernels.gemv3_int8 import gemv3_i8
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
from orcd.quant.kernels.gemv_multi import fused_gemv3
from orcd.quant.kernels.xquant import quantize_x

Q4_K, Q6_K = 12, 14  # GGMLQuantizationType
# Batches of up to this many rows take the norm-fused path when every product runs on the int8 GEMVs
# (fused_rows). H100, 7B Q4_K_M, sum of one step's products (bench/results/int8_gemv_7b_multi.md):
# the NT-token int8 kernels take 3.20 / 4.05 / 7.80 / 12.94 ms at 1 / 2 / 4 / 8 rows, the path above
# GEMV_MAX_N (batched_linear / dequantize + cuBLAS) 8.22 ms at 8: so 4, not more, until the int8
# kernels stop being instruction-bound at 8 rows.
I8_MAX_ROWS = 4


def _linear(m, x: torch.Tensor) -> torch.Tensor:
    """QuantLinear m applied to x [N, in]: fused GEMV over raw blocks (+ bias), else dense."""
    if m.raw is not None:
        return fused_linear(x, m.raw, m.out_features, m.in_features, m.qtype, m.bias)
    return F.linear(x, m.weight, m.bias)


class FusedDecoder:
    def __init__(self, model: torch.nn.Module, fuse_norm: bool = True, int8_x: bool = True):
        """fuse_norm: also fold each RMSNorm into the GEMVs that read it and each residual add into the
        GEMV that writes it (~7 kernels per layer), for batches of <= GEMV_MAX_N raw-weight models.
        int8_x (with fuse_norm): the Q4_K/Q6_K products (gate/up: Q4_K) read x quantized to int8 per 32
        (gemv_int8.py, gemv3_int8.py); ~1 % error per product on top of bf16's, as llama.cpp's MMVQ;
        not for float32 models."""
        self.model = model
        # float32 models keep float x (they are run for exactness)
        self.int8_x = int8_x and model.blocks[0].attn_norm.weight.dtype != torch.float32
        self.int8_attn = self.int8_x  # q/k/v and o too (a bench may switch this part off alone)
        if not getattr(model, "fused_decode", True):  # e.g. gemma3, qwen3: blocks this class does not run
            raise ValueError(f"{model.cfg.arch} has no fused decode step")
        rot = model.rotary
        a0 = model.blocks[0].attn
        if rot.rope_dim != a0.head_dim or a0.head_dim & (a0.head_dim - 1):
            raise ValueError("fused decode needs full-width rotary and a power-of-two head_dim")
        for blk in model.blocks:
            for m in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj, blk.attn.o_proj, blk.mlp.gate,
                      blk.mlp.up, blk.mlp.down):
                if m.raw is not None and get_fused_linear(m.qtype, m.raw.device) is None:
                    raise ValueError(f"no fused kernel for {m.qtype.name}")
        self.inv_freq = rot.inv_freq.float().contiguous()
        mods = [m for blk in model.blocks for m in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj,
                                                     blk.attn.o_proj, blk.mlp.gate, blk.mlp.up, blk.mlp.down)]
        self.fuse_norm = fuse_norm and all(m.raw is not None for m in mods + [model.lm_head]) and all(
            blk.mlp.gate.qtype == blk.mlp.up.qtype and blk.mlp.gate.bias is None and blk.mlp.up.bias is None
            and blk.attn.o_proj.bias is None and blk.mlp.down.bias is None for blk in model.blocks)

    def fused_rows(self) -> int:
        """The most rows the norm-fused step takes: I8_MAX_ROWS where every product (q/k/v, o, gate/up,
        down, LM head) runs on the int8 GEMVs, else GEMV_MAX_N (the float GEMVs' limit)."""
        model = self.model
        if not (self.int8_x and self.int8_attn and model.lm_head.qtype in (Q4_K, Q6_K)):
            return GEMV_MAX_N
        for blk in model.blocks:
            a, mlp = blk.attn, blk.mlp
            qkv = (a.q_proj, a.k_proj, a.v_proj)
            if not (all(m.qtype in (Q4_K, Q6_K) for m in (*qkv, a.o_proj, mlp.down))
                    and mlp.gate.qtype == Q4_K and mlp.up.qtype == Q4_K and mlp.gate.out_features % 32 == 0
                    and len({m.bias is None for m in qkv}) == 1):
                return GEMV_MAX_N
        return max(I8_MAX_ROWS, GEMV_MAX_N)

    def _mlp(self, mlp, h: torch.Tensor) -> torch.Tensor:
        g, u = mlp.gate, mlp.up
        glu_ok = g.raw is not None and u.raw is not None and g.qtype == u.qtype and h.shape[0] <= GEMV_MAX_N
        if glu_ok and g.bias is None and u.bias is None:
            act = fused_glu(h, g.raw, u.raw, g.out_features, g.in_features, g.qtype)
        else:
            act = F.silu(_linear(g, h)) * _linear(u, h)
        return _linear(mlp.down, act)

    def _mlp_norm_fused(self, mlp, nrm: tuple[torch.Tensor, float], res: torch.Tensor) -> None:
        """res += down(silu(gate(x)) * up(x)), x = RMSNorm(res) * weight; Q4_K gate/up with int8_x: x
        quantized once (one small kernel), the SwiGLU kernel quantizes its output for a Q4_K/Q6_K down."""
        g, u, dn = mlp.gate, mlp.up, mlp.down
        if self.int8_x and g.qtype == Q4_K and u.qtype == Q4_K and g.out_features % 32 == 0:
            xq, xs = quantize_x(res, norm=nrm)
            i8_down = dn.qtype in (Q4_K, Q6_K)
            act, aq, asc = glu_q4k_i8(xq, xs, g.raw, u.raw, g.out_features, g.in_features, res.dtype,
                                      quant_out=i8_down)
            if i8_down:
                gemv_i8(aq, asc, dn.raw, dn.out_features, dn.in_features, dn.qtype, residual=res)
                return
        else:
            act = fused_glu(res, g.raw, u.raw, g.out_features, g.in_features, g.qtype, norm=nrm)
        fused_gemv(act, dn.raw, dn.out_features, dn.in_features, dn.qtype, residual=res)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32; writes each token's K/V at meta.slot_mapping."""
        model = self.model
        res = model.embed(ids).contiguous()  # residual stream [B, H], updated in place
        delta = None
        b = ids.shape[0]
        if self.fuse_norm and b <= self.fused_rows():
            return self._forward_norm_fused(res, pos, meta, kv)
        for i, blk in enumerate(model.blocks):
            a = blk.attn
            h = add_rmsnorm(delta, res, blk.attn_norm.weight, blk.attn_norm.eps)
            q = _linear(a.q_proj, h).view(b, a.n_heads, a.head_dim)
            k = _linear(a.k_proj, h).view(b, a.n_kv_heads, a.head_dim)
            v = _linear(a.v_proj, h).view(b, a.n_kv_heads, a.head_dim)
            rope_and_write_kv(q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta.slot_mapping)
            o = paged_decode_attention(q, kv.k[i], kv.v[i], meta.block_tables, meta.seq_lens, a.scale)
            delta = _linear(a.o_proj, o.view(b, a.n_heads * a.head_dim))
            h = add_rmsnorm(delta, res, blk.ffn_norm.weight, blk.ffn_norm.eps)
            delta = self._mlp(blk.mlp, h)
        h = add_rmsnorm(delta, res, model.norm.weight, model.norm.eps)
        return _linear(model.lm_head, h).float()

    def _forward_norm_fused(self, res: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv):
        """Norms computed inside the GEMVs that consume them, residual adds inside the GEMVs that
        produce them: per layer qkv, RoPE+KV, attention (2), o(+res), gate/up/SiLU, down(+res)."""
        model, b = self.model, res.shape[0]
        for i, blk in enumerate(model.blocks):
            a, mlp = blk.attn, blk.mlp
            nrm = (blk.attn_norm.weight, blk.attn_norm.eps)
            qkv = (a.q_proj, a.k_proj, a.v_proj)
            i8 = self.int8_attn and all(m.qtype in (Q4_K, Q6_K) for m in (*qkv, a.o_proj))
            if i8 and len({m.bias is None for m in qkv}) == 1:
                xq, xs = quantize_x(res, norm=nrm)
                q, k, v = gemv3_i8(xq, xs, [(m.raw, m.out_features, m.qtype, m.bias) for m in qkv],
                                   a.q_proj.in_features, res.dtype)
            elif len({m.bias is None for m in qkv}) == 1:  # one launch for the three products
                q, k, v = fused_gemv3(res, [(m.raw, m.out_features, m.qtype, m.bias) for m in qkv],
                                      a.q_proj.in_features, norm=nrm)
            else:
                q, k, v = (fused_gemv(res, m.raw, m.out_features, m.in_features, m.qtype, m.bias, norm=nrm)
                           for m in qkv)
            q = q.view(b, a.n_heads, a.head_dim)
            k, v = k.view(b, a.n_kv_heads, a.head_dim), v.view(b, a.n_kv_heads, a.head_dim)
            rope_and_write_kv(q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta.slot_mapping)
            o = paged_decode_attention(q, kv.k[i], kv.v[i], meta.block_tables, meta.seq_lens, a.scale)
            m = a.o_proj
            if i8:
                xq, xs = quantize_x(o.view(b, -1))
                gemv_i8(xq, xs, m.raw, m.out_features, m.in_features, m.qtype, residual=res)
            else:
                fused_gemv(o.view(b, -1), m.raw, m.out_features, m.in_features, m.qtype, residual=res)
            self._mlp_norm_fused(mlp, (blk.ffn_norm.weight, blk.ffn_norm.eps), res)
        m = model.lm_head
        if self.int8_x and m.qtype in (Q4_K, Q6_K):  # the final RMSNorm inside the x quantization
            xq, xs = quantize_x(res, norm=(model.norm.weight, model.norm.eps))
            y = gemv_i8(xq, xs, m.raw, m.out_features, m.in_features, m.qtype, m.bias, dtype=res.dtype)
            return y.float()
        # the final RMSNorm as one small kernel of its own: inside the head GEMV, each of its ~38k
        # programs would redo the RMS
        h = add_rmsnorm(None, res, model.norm.weight, model.norm.eps)
        return fused_gemv(h, m.raw, m.out_features, m.in_features, m.qtype, m.bias).float()
