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
dense_rows (opt-in, off by default): batches of >= that many rows run the unfused step's products as
cuBLAS GEMMs over dense copies of the weights made once at construction (dense_weights.py: memory
for speed, 2 bytes a weight in bf16); smaller batches keep the quantized kernels.
Meant to be captured by `DecodeGraphs(step_fn=FusedDecoder(model))`. Models it cannot run raise
ValueError at construction.
"""

from __future__ import annotations

import torch

from orcd.models.layers.attention import AttnMetadata
from orcd.quant.kernels.decode_ops import add_rmsnorm
from orcd.runner.block_linears import BlockLinears, check_block_kind, check_fusable, norm_fusable
from orcd.runner.decode_products import I8_MAX_ROWS as I8_MAX_ROWS  # re-exported: tests and benches
from orcd.runner.decode_products import QuantRows, attend, linear, step_products
from orcd.runner.dense_weights import (
    DenseCopiesError,
    DenseWeights,
    check_dense_rows,
    check_fits,
    dense_nbytes,
)


def block_linears(blk) -> BlockLinears:
    a, m = blk.attn, blk.mlp
    return BlockLinears(a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate, m.up, m.down)


def split_readers(model: torch.nn.Module) -> list:
    """The raw Q6_K QuantLinears the fused decode step reads in the split layout wherever it hands them
    (DecodeProducts.split_readers; q6k_layout="auto"), [] for a model the step does not run."""
    if not getattr(model, "fused_decode", True):
        return []
    linears = [block_linears(blk) for blk in model.blocks]
    try:
        check_fusable(model, linears)
    except ValueError:
        return []
    return step_products(model).split_readers(linears, model.lm_head)


def _dense_plan(model: torch.nn.Module) -> tuple[list[BlockLinears], int]:
    """(the blocks' linears, the bytes their dense copies and the head's take); ValueError for a model
    this step cannot run."""
    check_block_kind(model)
    linears = [block_linears(blk) for blk in model.blocks]
    check_fusable(model, linears)
    return linears, dense_nbytes(linears, model.lm_head, model.lm_head.dtype)


def dense_need(model: torch.nn.Module) -> int | None:
    """Bytes dense_copies(model, ...) would allocate; None for a model this step cannot run."""
    try:
        return _dense_plan(model)[1]
    except (ValueError, AttributeError):
        return None


def dense_copies(model: torch.nn.Module, rows: int) -> DenseWeights:
    """The dense copies FusedDecoder(model, dense=...) runs batches of >= rows on, made now (the engine
    makes them before it sizes the KV cache from the free memory). DenseCopiesError (a ValueError) for a
    bad rows or copies that do not fit the free device memory; ValueError for a model this step cannot run."""
    check_dense_rows(rows)
    linears, need = _dense_plan(model)
    head = model.lm_head
    check_fits(need, torch.device(model.norm.weight.device))
    try:
        return DenseWeights.build(linears, head, rows)
    except torch.cuda.OutOfMemoryError as err:  # free memory was enough for the copies, not the temporaries
        torch.cuda.empty_cache()
        raise DenseCopiesError(f"out of device memory making the dense decode copies "
                               f"({need / 2**30:.2f} GiB): drop --dense-batch-rows") from err


class FusedDecoder:
    def __init__(self, model: torch.nn.Module, fuse_norm: bool = True, int8_x: bool = True,
                 batched_qkv: bool = True, dense_rows: int | None = None, dense: DenseWeights | None = None):
        """fuse_norm: also fold each RMSNorm into the GEMVs that read it and each residual add into the
        GEMV that writes it (~7 kernels per layer), for batches of <= fused_rows() raw-weight models.
        int8_x (with fuse_norm): the Q4_K/Q6_K products read x quantized to int8 (DecodeProducts); not
        for float32 models (they are run for exactness: they keep float x).
        batched_qkv: at 5..64 rows (the unfused step) q/k/v in one launch where qkv_one_launch picks it;
        on by default since session 9's H100 run (7B engine, 8 streams: 1,078 -> 1,153 tok/s).
        dense_rows: batches of >= dense_rows rows run on dense copies of the weights made here (None: off);
        dense: copies already made (dense_copies; their .rows is the threshold) instead."""
        self.model = model
        check_block_kind(model)  # before block_linears: other blocks have no gate/up
        self.linears = [block_linears(blk) for blk in model.blocks]
        check_fusable(model, self.linears)
        self.products = step_products(model, int8_x, batched_qkv)
        self.inv_freq = model.rotary.inv_freq.float().contiguous()
        self.fuse_norm = fuse_norm and norm_fusable(self.linears, model.lm_head)
        if self.fuse_norm:
            self.products.check_layouts(self.linears, model.lm_head)
        self.quant_rows = [QuantRows(lin, self.products) for lin in self.linears]  # the unfused step's
        if dense is not None and dense_rows not in (None, dense.rows):
            raise DenseCopiesError(f"dense_rows {dense_rows} disagrees with the copies' {dense.rows}")
        self.dense = dense if dense is not None or dense_rows is None else dense_copies(model, dense_rows)

    @property
    def dense_rows(self) -> int | None:
        """The smallest batch that runs on the dense copies, or None (off)."""
        return self.dense.rows if self.dense is not None else None

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
        res = self.model.embed(ids).contiguous()  # residual stream [B, H], updated in place
        b = ids.shape[0]
        if self.dense is not None and self.dense.takes(b):
            return self._forward_rows(res, pos, meta, kv, self.dense.blocks, self.dense.logits)
        if self.fuse_norm and b <= self.fused_rows():
            return self._forward_norm_fused(res, pos, meta, kv)
        return self._forward_rows(res, pos, meta, kv, self.quant_rows,
                                  lambda h: linear(self.model.lm_head, h).float())

    def _forward_rows(self, res: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv, rows: list,
                      logits) -> torch.Tensor:
        """The unfused step (add+RMSNorm kernels stand alone): per block rows[i]'s qkv, o_proj, mlp
        (QuantRows over raw blocks, or DenseBlock); logits(h [B, H]) -> [B, V] float32."""
        model, delta = self.model, None
        for i, (blk, p) in enumerate(zip(model.blocks, rows, strict=True)):
            h = add_rmsnorm(delta, res, blk.attn_norm.weight, blk.attn_norm.eps)
            q, k, v = p.qkv(h)
            delta = p.o_proj(attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta))
            h = add_rmsnorm(delta, res, blk.ffn_norm.weight, blk.ffn_norm.eps)
            delta = p.mlp(h)
        return logits(add_rmsnorm(delta, res, model.norm.weight, model.norm.eps))

    def _forward_norm_fused(self, res: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv):
        """Norms computed inside the GEMVs that consume them, residual adds inside the GEMVs that
        produce them: per layer qkv, RoPE+KV, attention (2), o(+res), gate/up/SiLU, down(+res)."""
        model, p = self.model, self.products
        for i, (blk, lin) in enumerate(zip(model.blocks, self.linears, strict=True)):
            q, k, v = p.qkv(lin, res, (blk.attn_norm.weight, blk.attn_norm.eps))
            o = attend(blk.attn, q, k, v, pos, self.inv_freq, kv.k[i], kv.v[i], meta, quant=p.attn_i8(lin))
            p.o(lin, o, res)
            p.down(lin, p.glu(lin, res, (blk.ffn_norm.weight, blk.ffn_norm.eps)), res)
        return p.head(model.lm_head, res, (model.norm.weight, model.norm.eps)).float()
