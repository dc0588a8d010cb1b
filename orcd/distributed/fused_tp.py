"""The fused decode step for one rank's shard: FusedDecoder's kernels with the collectives in between.

orcd.runner.fused_decode.FusedDecoder reads QuantLinear buffers directly, so on a sharded model
(shard.py) it would skip the row-parallel all-reduces. This class runs the same kernels on the rank's
slices and adds the collectives itself, so a decode graph (tp_runner.py) holds per block: the q/k/v
GEMV (RMSNorm fused), RoPE + KV write, attention, o GEMV, one all-reduce, gate/up/SiLU (RMSNorm
fused), down GEMV, one all-reduce; then the final norm, this rank's vocabulary rows of the head and
one all-gather. The embedding is VocabParallelEmbedding's (one all-reduce).

Residual under TP (batches <= GEMV_MAX_N): rank 0's o/down GEMV adds its partial sum into the
residual stream in place (the fused epilogue), every other rank first zeroes the stream and writes
its partial sum there, then one in-place all-reduce leaves res + sum of the partials on every rank.
So the stream costs no extra kernel on rank 0 and one memset elsewhere. Larger batches keep the
add+RMSNorm kernels and all-reduce the product (FusedDecoder's unfused path).
Not batch-invariant (NCCL's reduction order depends on the message size): the runner captures
model.forward under the invariant kernels for those steps (tp_runner.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from orcd.distributed.layers import RowParallelLinear, VocabParallelEmbedding, VocabParallelHead
from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.quant.kernels import get_fused_linear
from orcd.quant.kernels.decode_ops import add_rmsnorm, rope_and_write_kv
from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_gemv, fused_glu, fused_linear
from orcd.quant.kernels.gemv_multi import fused_gemv3


def _linear(m, x: torch.Tensor) -> torch.Tensor:
    """QuantLinear m on x [N, in]: the fused GEMV / batched kernel over raw blocks (+ bias), else dense."""
    if m.raw is not None:
        return fused_linear(x, m.raw, m.out_features, m.in_features, m.qtype, m.bias)
    return F.linear(x, m.weight, m.bias)


def _linears(blk) -> list:
    """A block's QuantLinears on this rank (row-parallel ones unwrapped)."""
    a, m = blk.attn, blk.mlp
    return [a.q_proj, a.k_proj, a.v_proj, a.o_proj.inner, m.gate, m.up, m.down.inner]


def check_sharded(model) -> None:
    """ValueError unless `model` is a shard this class runs (shard.py's wrappers, fused kernels)."""
    if not getattr(model, "fused_decode", True):
        raise ValueError(f"{model.cfg.arch} has no fused decode step")
    if not (isinstance(model.embed, VocabParallelEmbedding) and isinstance(model.lm_head, VocabParallelHead)):
        raise ValueError("not a tensor-parallel shard (orcd.distributed.shard.shard_model)")
    rot, a0 = model.rotary, model.blocks[0].attn
    if rot.rope_dim != a0.head_dim or a0.head_dim & (a0.head_dim - 1):
        raise ValueError("fused decode needs full-width rotary and a power-of-two head_dim")
    for blk in model.blocks:
        if not all(isinstance(m, RowParallelLinear) for m in (blk.attn.o_proj, blk.mlp.down)):
            raise ValueError("not a tensor-parallel shard (orcd.distributed.shard.shard_model)")
        for m in _linears(blk):
            if m.raw is not None and get_fused_linear(m.qtype, m.raw.device) is None:
                raise ValueError(f"no fused kernel for {m.qtype.name}")


class TPFusedDecoder:
    def __init__(self, model: torch.nn.Module, rank: int, group=None):
        """model: this rank's shard; group: the tensor collectives' (None = the world group)."""
        check_sharded(model)
        self.model, self.rank, self.group = model, rank, group
        self.inv_freq = model.rotary.inv_freq.float().contiguous()
        mods = [m for blk in model.blocks for m in _linears(blk)] + [model.lm_head.inner]
        self.fuse_norm = all(m.raw is not None for m in mods) and all(
            blk.mlp.gate.qtype == blk.mlp.up.qtype and blk.mlp.gate.bias is None and blk.mlp.up.bias is None
            and blk.attn.o_proj.inner.bias is None and blk.mlp.down.inner.bias is None
            for blk in model.blocks)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32 (all ranks equal); writes this rank's K/V heads."""
        res = self.model.embed(ids).contiguous()  # residual stream [B, H], the same on every rank
        if self.fuse_norm and ids.shape[0] <= GEMV_MAX_N:
            self._blocks_norm_fused(res, pos, meta, kv)
            h = add_rmsnorm(None, res, self.model.norm.weight, self.model.norm.eps)
        else:
            h = self._blocks(res, pos, meta, kv)
        head = self.model.lm_head
        return head.gather(_linear(head.inner, h)).float()

    def _attend(self, i: int, a, q, k, v, pos, meta, kv) -> torch.Tensor:
        """RoPE + K/V write + paged attention of block i -> [B, local heads * head_dim]."""
        b = q.shape[0]
        q = q.view(b, a.n_heads, a.head_dim)
        k, v = k.view(b, a.n_kv_heads, a.head_dim), v.view(b, a.n_kv_heads, a.head_dim)
        rope_and_write_kv(q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta.slot_mapping)
        o = paged_decode_attention(q, kv.k[i], kv.v[i], meta.block_tables, meta.seq_lens, a.scale)
        return o.view(b, a.n_heads * a.head_dim)

    def _reduce_into(self, res: torch.Tensor, x: torch.Tensor, m: RowParallelLinear) -> None:
        """res += all_reduce(x @ W_local.T) in place (res [B, H], the same on every rank before and after)."""
        w = m.inner
        if self.rank:
            res.zero_()  # this rank contributes its partial sum only; rank 0 brings the residual
        fused_gemv(x, w.raw, w.out_features, w.in_features, w.qtype, residual=res)
        dist.all_reduce(res, group=self.group)

    def _blocks_norm_fused(self, res: torch.Tensor, pos, meta, kv) -> None:
        """Batches <= GEMV_MAX_N: norms inside the GEMVs that read them, residual adds in the ones that
        write it; per block qkv, RoPE+KV, attention, o + all-reduce, gate/up/SiLU, down + all-reduce."""
        for i, blk in enumerate(self.model.blocks):
            a, mlp = blk.attn, blk.mlp
            nrm = (blk.attn_norm.weight, blk.attn_norm.eps)
            qkv = (a.q_proj, a.k_proj, a.v_proj)
            if len({m.bias is None for m in qkv}) == 1:  # one launch for the three products
                q, k, v = fused_gemv3(res, [(m.raw, m.out_features, m.qtype, m.bias) for m in qkv],
                                      a.q_proj.in_features, norm=nrm)
            else:
                q, k, v = (fused_gemv(res, m.raw, m.out_features, m.in_features, m.qtype, m.bias, norm=nrm)
                           for m in qkv)
            self._reduce_into(res, self._attend(i, a, q, k, v, pos, meta, kv), a.o_proj)
            g, u = mlp.gate, mlp.up
            act = fused_glu(res, g.raw, u.raw, g.out_features, g.in_features, g.qtype,
                            norm=(blk.ffn_norm.weight, blk.ffn_norm.eps))
            self._reduce_into(res, act, mlp.down)

    def _blocks(self, res: torch.Tensor, pos, meta, kv) -> torch.Tensor:
        """Any batch: add+RMSNorm kernels stand alone, the row-parallel products are all-reduced.
        Returns the final RMSNorm of the stream [B, H]."""
        delta = None
        for i, blk in enumerate(self.model.blocks):
            a, mlp = blk.attn, blk.mlp
            h = add_rmsnorm(delta, res, blk.attn_norm.weight, blk.attn_norm.eps)
            o = self._attend(i, a, _linear(a.q_proj, h), _linear(a.k_proj, h), _linear(a.v_proj, h),
                             pos, meta, kv)
            delta = self._all_reduce(_linear(a.o_proj.inner, o))
            h = add_rmsnorm(delta, res, blk.ffn_norm.weight, blk.ffn_norm.eps)
            act = F.silu(_linear(mlp.gate, h)) * _linear(mlp.up, h)
            delta = self._all_reduce(_linear(mlp.down.inner, act))
        return add_rmsnorm(delta, res, self.model.norm.weight, self.model.norm.eps)

    def _all_reduce(self, y: torch.Tensor) -> torch.Tensor:
        y = y.contiguous()
        dist.all_reduce(y, group=self.group)
        return y
