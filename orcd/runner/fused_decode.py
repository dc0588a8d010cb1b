"""A decode-only forward over the model's own weights with fused kernels (one token per sequence).

Same function as `model.forward` + `compute_logits` for steps where every sequence has one new token,
in 7 kernels per layer instead of ~40 (fuse_norm, batches <= 4, or <= I8_MAX_ROWS when every product
runs on the int8 GEMVs): one launch for the q, k, v GEMVs (RMSNorm and bias fused), RoPE + KV write,
split-K attention (2), o GEMV (+ residual), gate/up/SiLU GEMV (RMSNorm fused), down GEMV (+ residual).
Otherwise 11: add+RMSNorm kernels stand alone.
With int8_x on Q4_K/Q6_K weights (the default for bf16/fp16 models) also 11: the GEMVs read x quantized
to int8 per 32 by a small kernel before q/k/v (with the RMSNorm), o, gate/up (RMSNorm) and down; fewer
instructions per weight pay for the 4 extra launches (docs/performance.md, 7B).
Which kernel runs each product is decode_products.py's (shared with the tensor-parallel step).
Meant to be captured by `DecodeGraphs(step_fn=FusedDecoder(model))`. Models it cannot run raise
ValueError at construction.
"""

from __future__ import annotations

import torch

from orcd.models.layers.attention import AttnMetadata
from orcd.quant.kernels.decode_ops import add_rmsnorm
from orcd.runner.decode_products import I8_MAX_ROWS as I8_MAX_ROWS  # re-exported: tests and benches
from orcd.runner.decode_products import (
    BlockLinears,
    DecodeProducts,
    attend,
    check_block_kind,
    check_fusable,
    glu,
    linear,
    norm_fusable,
)


def block_linears(blk) -> BlockLinears:
    a, m = blk.attn, blk.mlp
    return BlockLinears(a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate, m.up, m.down)


class FusedDecoder:
    def __init__(self, model: torch.nn.Module, fuse_norm: bool = True, int8_x: bool = True,
                 batched_qkv: bool = True):
        """fuse_norm: also fold each RMSNorm into the GEMVs that read it and each residual add into the
        GEMV that writes it (~7 kernels per layer), for batches of <= fused_rows() raw-weight models.
        int8_x (with fuse_norm): the Q4_K/Q6_K products read x quantized to int8 (DecodeProducts); not
        for float32 models (they are run for exactness: they keep float x).
        batched_qkv: at 5..64 rows (the unfused step) q/k/v in one launch (DecodeProducts.qkv_rows);
        on by default since session 9's H100 run (7B engine, 8 streams: 1,078 -> 1,153 tok/s)."""
        self.model = model
        check_block_kind(model)  # before block_linears: other blocks have no gate/up
        self.linears = [block_linears(blk) for blk in model.blocks]
        check_fusable(model, self.linears)
        int8 = int8_x and model.blocks[0].attn_norm.weight.dtype != torch.float32
        self.products = DecodeProducts(int8_x=int8, int8_attn=int8, batched_qkv=batched_qkv)
        self.inv_freq = model.rotary.inv_freq.float().contiguous()
        self.fuse_norm = fuse_norm and norm_fusable(self.linears, model.lm_head)

    @property
    def int8_x(self) -> bool:
        return self.products.int8_x

    @property
    def int8_attn(self) -> bool:
        return self.products.int8_attn

    @int8_attn.setter
    def int8_attn(self, on: bool) -> None:  # a bench switches the q/k/v and o part off alone
        self.products.int8_attn = on

    def fused_rows(self) -> int:
        """The most rows the norm-fused step takes (DecodeProducts.fused_rows)."""
        return self.products.fused_rows(self.linears, self.model.lm_head)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32; writes each token's K/V at meta.slot_mapping."""
        model = self.model
        res = model.embed(ids).contiguous()  # residual stream [B, H], updated in place
        if self.fuse_norm and ids.shape[0] <= self.fused_rows():
            return self._forward_norm_fused(res, pos, meta, kv)
        delta = None
        for i, (blk, lin) in enumerate(zip(model.blocks, self.linears, strict=True)):
            h = add_rmsnorm(delta, res, blk.attn_norm.weight, blk.attn_norm.eps)
            q, k, v = self.products.qkv_rows(lin, h)
            delta = linear(lin.o, attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta))
            h = add_rmsnorm(delta, res, blk.ffn_norm.weight, blk.ffn_norm.eps)
            delta = linear(lin.down, glu(lin.gate, lin.up, h))
        h = add_rmsnorm(delta, res, model.norm.weight, model.norm.eps)
        return linear(model.lm_head, h).float()

    def _forward_norm_fused(self, res: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv):
        """Norms computed inside the GEMVs that consume them, residual adds inside the GEMVs that
        produce them: per layer qkv, RoPE+KV, attention (2), o(+res), gate/up/SiLU, down(+res)."""
        model, p = self.model, self.products
        for i, (blk, lin) in enumerate(zip(model.blocks, self.linears, strict=True)):
            q, k, v = p.qkv(lin, res, (blk.attn_norm.weight, blk.attn_norm.eps))
            p.o(lin, attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta), res)
            p.down(lin, p.glu(lin, res, (blk.ffn_norm.weight, blk.ffn_norm.eps)), res)
        return p.head(model.lm_head, res, (model.norm.weight, model.norm.eps)).float()
