"""The fused decode step for one rank's shard: FusedDecoder's kernels with the collectives in between.

orcd.runner.fused_decode.FusedDecoder reads QuantLinear buffers directly, so on a sharded model
(shard.py) it would skip the row-parallel all-reduces. This class runs the same products
(orcd.runner.decode_products: the int8-activation GEMVs for Q4_K/Q6_K on bf16/fp16 models, else the
float GEMVs) on the rank's slices and adds the collectives itself, so a decode graph (tp_runner.py)
holds per block: the q/k/v GEMV (RMSNorm fused), RoPE + KV write, attention, o GEMV, one all-reduce,
gate/up/SiLU (RMSNorm fused), down GEMV, one all-reduce; then the final norm, this rank's vocabulary
rows of the head and one all-gather. The embedding is VocabParallelEmbedding's (one all-reduce).

Residual under TP (batches <= fused_rows): rank 0's o/down GEMV adds its partial sum into the
residual stream in place (the fused epilogue), every other rank writes its partial sum into a new
tensor, then one in-place all-reduce leaves res + sum of the partials on every rank (in rank 0's stream,
in the others' new tensors, which become their stream). So the stream costs no extra kernel on any rank
(until session 25 ranks > 0 zeroed their stream first: a memset before each o and down). That
all-reduce is NCCL's, or with all_reduce="symm" a one-shot kernel over symmetric memory
(symm_allreduce.py: 7.9 / 8.5 against NCCL's 23.5 / 33.5 us per call in graphs on 2 / 4 H200s; the 72B's
step +5 % at TP 4, even at TP 2: NCCL stays the default, `--all-reduce symm` selects it).
With int8 x, each rank quantizes its own slice of the attention output / SwiGLU output per 32 (the
cuts are on 256-column block boundaries, so the 32-groups are the unsharded model's). Larger batches
keep the add+RMSNorm kernels and all-reduce the product (FusedDecoder's unfused path).
Not batch-invariant (NCCL's reduction order depends on the message size): the runner captures
model.forward under the invariant kernels for those steps (tp_runner.py).
Q6_K weights (issue 21): the ones this step reads split wherever it hands them (split_readers: v/o
after int8 q/k/v, down after the int8 SwiGLU, the head's rows) are in the split layout by default,
converted after slicing (driver.load_sharded, q6k_layout="auto"); the rest, and the embedding's table,
keep GGUF's blocks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from orcd.distributed.layers import RowParallelLinear, VocabParallelEmbedding, VocabParallelHead
from orcd.distributed.symm_allreduce import make_all_reduce
from orcd.models.layers.attention import AttnMetadata
from orcd.quant.kernels.decode_ops import add_rmsnorm
from orcd.runner.block_linears import BlockLinears, check_block_kind, check_fusable, norm_fusable
from orcd.runner.decode_products import attend, glu, linear, step_products


def block_linears(blk) -> BlockLinears:
    """A block's QuantLinears on this rank (row-parallel ones unwrapped)."""
    a, m = blk.attn, blk.mlp
    return BlockLinears(a.q_proj, a.k_proj, a.v_proj, a.o_proj.inner, m.gate, m.up, m.down.inner)


def check_sharded(model) -> None:
    """ValueError unless `model` is a shard this class runs (shard.py's wrappers, fused kernels)."""
    if not (isinstance(model.embed, VocabParallelEmbedding) and isinstance(model.lm_head, VocabParallelHead)):
        raise ValueError("not a tensor-parallel shard (orcd.distributed.shard.shard_model)")
    for blk in model.blocks:
        if not all(isinstance(m, RowParallelLinear) for m in (blk.attn.o_proj, blk.mlp.down)):
            raise ValueError("not a tensor-parallel shard (orcd.distributed.shard.shard_model)")


def split_readers(model) -> list:
    """The raw Q6_K QuantLinears of this rank's shard that TPFusedDecoder(model) reads in the split
    layout wherever it hands them (DecodeProducts.split_readers over the rank's slices and the head's
    rows; q6k_layout="auto" under TP), [] for a shard the step does not run. Called after slicing (the
    split layout's rows are not W's rows). The same choice on every rank: it reads the types, q/k/v's
    biases (every rank has them or none), gate's rows (a multiple of the down's block on every rank),
    never o/down's bias (rank 0's alone). The embedding's table is no reader (a tied head shares it:
    the caller keeps tables GGUF)."""
    try:
        check_sharded(model)
        check_block_kind(model)  # before block_linears: other blocks have no gate/up
        linears = [block_linears(blk) for blk in model.blocks]
        check_fusable(model, linears)
    except ValueError:
        return []
    return step_products(model).split_readers(linears, model.lm_head.inner)


class TPFusedDecoder:
    def __init__(self, model: torch.nn.Module, rank: int, group=None, int8_x: bool = True,
                 all_reduce: str = "nccl", batched_qkv: bool = True):
        """model: this rank's shard; group: the tensor collectives' (None = the world group).
        int8_x, batched_qkv: as FusedDecoder's (int8 off for float32 models whatever it says; batched_qkv:
        the rank's q/k/v slices of a 5..64-row batch in one launch). all_reduce: "nccl", or
        "symm" for the norm-fused path's residual all-reduces (symm_allreduce.py; NCCL where
        unavailable, on every rank alike)."""
        check_sharded(model)
        check_block_kind(model)  # before block_linears: other blocks have no gate/up
        self.linears = [block_linears(blk) for blk in model.blocks]
        check_fusable(model, self.linears)
        self.model, self.rank, self.group = model, rank, group
        self.inv_freq = model.rotary.inv_freq.float().contiguous()
        self.products = step_products(model, int8_x, batched_qkv)
        self.fuse_norm = self._agree(norm_fusable(self.linears, model.lm_head.inner))
        w = model.blocks[0].attn_norm.weight  # the residual's dtype; hidden = its length
        ar = make_all_reduce(all_reduce, self.fused_rows() * w.shape[0], w.dtype, w.device,
                             group) if self.fuse_norm else None
        self.symm = ar if self._agree(ar is not None) else None
        self.all_reduce_kind = "symm" if self.symm is not None else "nccl"

    def _agree(self, ok: bool) -> bool:
        """ok on every rank (one all-reduce, MIN): rank 0 alone holds o/down's bias (shard.py), so the
        ranks could disagree, and a step must take one path everywhere."""
        flag = torch.tensor([int(ok)], device=self.model.norm.weight.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    def fused_rows(self) -> int:
        """The most rows the norm-fused step takes (DecodeProducts.fused_rows on this rank's slices)."""
        return self.products.fused_rows(self.linears, self.model.lm_head.inner)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32 (all ranks equal); writes this rank's K/V heads."""
        model, head = self.model, self.model.lm_head
        res = model.embed(ids).contiguous()  # residual stream [B, H], the same on every rank
        if self.fuse_norm and ids.shape[0] <= self.fused_rows():
            res = self._blocks_norm_fused(res, pos, meta, kv)
            local = self.products.head(head.inner, res, (model.norm.weight, model.norm.eps))
        else:
            local = linear(head.inner, self._blocks(res, pos, meta, kv))
        return head.gather(local).float()

    def _blocks_norm_fused(self, res: torch.Tensor, pos, meta, kv) -> torch.Tensor:
        """Batches <= fused_rows: norms inside the GEMVs that read them, residual adds in the ones that
        write it; per block qkv, RoPE+KV, attention, o + all-reduce, gate/up/SiLU, down + all-reduce.
        Ranks > 0 contribute the partial only: their o / down write it to a new tensor (partial=True),
        which the all-reduce turns into the stream. Returns the stream after the last block."""
        p, partial = self.products, self.rank > 0
        for i, (blk, lin) in enumerate(zip(self.model.blocks, self.linears, strict=True)):
            q, k, v = p.qkv(lin, res, (blk.attn_norm.weight, blk.attn_norm.eps))
            o = attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta, quant=p.attn_i8(lin))
            res = p.o(lin, o, res, partial)
            self._reduce_res(res, 0)
            act = p.glu(lin, res, (blk.ffn_norm.weight, blk.ffn_norm.eps))
            res = p.down(lin, act, res, partial)
            self._reduce_res(res, 1)
        return res

    def _reduce_res(self, res: torch.Tensor, slot: int) -> None:
        """res <- sum over ranks, in place (slot: the call's position, o = 0, down = 1; symm_allreduce.py)."""
        if self.symm is None:
            dist.all_reduce(res, group=self.group)
        else:
            self.symm(res, slot)

    def _blocks(self, res: torch.Tensor, pos, meta, kv) -> torch.Tensor:
        """Any batch: add+RMSNorm kernels stand alone, the row-parallel products are all-reduced.
        Returns the final RMSNorm of the stream [B, H]."""
        delta = None
        for i, (blk, lin) in enumerate(zip(self.model.blocks, self.linears, strict=True)):
            h = add_rmsnorm(delta, res, blk.attn_norm.weight, blk.attn_norm.eps)
            q, k, v = self.products.qkv_rows(lin, h)
            o = attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta)
            delta = self._all_reduce(linear(lin.o, o))
            h = add_rmsnorm(delta, res, blk.ffn_norm.weight, blk.ffn_norm.eps)
            delta = self._all_reduce(self.products.down_rows(lin, glu(lin.gate, lin.up, h)))
        return add_rmsnorm(delta, res, self.model.norm.weight, self.model.norm.eps)

    def _all_reduce(self, y: torch.Tensor) -> torch.Tensor:
        y = y.contiguous()
        dist.all_reduce(y, group=self.group)
        return y
