"""The fused decode step's products, one choice of kernels per product, shared by FusedDecoder (one GPU,
orcd/runner/fused_decode.py) and TPFusedDecoder (one rank's shard, orcd/distributed/fused_tp.py).

Per block, with norms fused (batches <= `fused_rows`): q/k/v in one launch (int8 x: quantize_x with
the RMSNorm, then gemv3_i8; else fused_gemv3 with the norm inside), o (+ residual), gate/up/SiLU (norm
fused; int8: the SwiGLU kernel also quantizes its output for down), down (+ residual); then the final
norm and the head. The callers put what lies between (RoPE + KV write, attention; under TP zeroing the
stream on ranks > 0 and the all-reduces) around these calls. The linears are plain QuantLinears (a
row-parallel wrapper's `.inner`), so a shard's slices run the same launches as the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.quant.kernels import gemv_cuda
from orcd.quant.kernels.batched_qkv import batched_qkv, qkv_one_launch
from orcd.quant.kernels.decode_ops import add_rmsnorm, rope_and_write_kv
from orcd.quant.kernels.fused_linear import GEMV_MAX_N, MM_MAX_N, fused_gemv, fused_glu, fused_linear
from orcd.quant.kernels.gemv3_int8 import gemv3_i8
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
from orcd.quant.kernels.gemv_legacy_int8 import gemv_legacy_i8
from orcd.quant.kernels.gemv_multi import fused_gemv3
from orcd.quant.kernels.mmq_legacy import mmq_legacy_routed
from orcd.quant.kernels.q6k_split import split_linear
from orcd.quant.kernels.xquant import quantize_x
from orcd.runner.block_linears import BlockLinears, gguf_raw, split

Q5_0, Q8_0, Q4_K, Q6_K = 6, 8, 12, 14  # GGMLQuantizationType
I8_TYPES = (Q4_K, Q6_K)
# down also reads Q5_0 / Q8_0 with int8 x (gemv_legacy_int8.py): llama.cpp's fallbacks where the FFN width
# is not a multiple of 256 (Qwen2.5-72B's 29,568)
LEGACY_I8_TYPES = (Q5_0, Q8_0)
DOWN_I8_TYPES = I8_TYPES + LEGACY_I8_TYPES
# Batches of up to this many rows take the norm-fused path when every product runs on the int8 GEMVs
# (fused_rows). H100, 7B Q4_K_M, sum of one step's products (bench/results/int8_gemv_7b_multi.md):
# the NT-token int8 kernels take 3.20 / 4.05 / 7.80 / 12.94 ms at 1 / 2 / 4 / 8 rows, the path above
# GEMV_MAX_N (batched_linear / dequantize + cuBLAS) 8.22 ms at 8: so 4, not more, until the int8
# kernels stop being instruction-bound at 8 rows.
I8_MAX_ROWS = 4
# The unfused step's Q5_0 downs of 5..8 rows run on gemv_legacy_i8 (x quantized per 32, 8 tokens per
# program: one weight read) instead of dequantize + cuBLAS: one H200, the 72B's Q5_0 ffn_down at 8 rows,
# 218 against 322 us (one GPU), 97.5 against 188 (a TP 2 rank), 47.6 against 81 (TP 4); at 16 rows the
# int8 kernel is instruction-bound and no faster (bench/results/tp4_s25/m1_batched_*.json). Where
# mmq_legacy.py's tensor-core kernel runs (16-bit x, NVRTC) linear takes them instead: 8 rows 125.8 / 36.5
# against 215.4 / 47.8 us on one GPU / a TP 4 rank (bench/results/mmq_legacy_s26/).
LEGACY_ROWS_MAX = 8

Norm = tuple[torch.Tensor, float]  # (RMSNorm weight [H], eps)


def linear(m, x: torch.Tensor) -> torch.Tensor:
    """QuantLinear m on x [N, in]: fused GEMV / batched kernel over raw blocks (+ bias), else dense (a
    split Q6_K weight: kernels/q6k_split.split_linear, fused_linear's kernels and values)."""
    if split(m):
        return split_linear(x, m.raw, m.out_features, m.in_features, m.bias)
    if m.raw is not None:
        return fused_linear(x, m.raw, m.out_features, m.in_features, m.qtype, m.bias)
    return F.linear(x, m.weight, m.bias)


def attend(a, q, k, v, pos: torch.Tensor, inv_freq: torch.Tensor, k_cache, v_cache,
           meta: AttnMetadata, quant: bool = False):
    """RoPE + K/V write + paged attention of one block (a: its Attention, for the head counts; q, k, v
    [B, heads * head_dim] from its products) -> [B, heads * head_dim]. quant (where head_dim % 32 == 0):
    instead that output as quantize_x gives it, (words, scales), written by the attention's split merge
    (no launch of its own; bit for bit quantize_x's)."""
    b = q.shape[0]
    q = q.view(b, a.n_heads, a.head_dim)
    k, v = k.view(b, a.n_kv_heads, a.head_dim), v.view(b, a.n_kv_heads, a.head_dim)
    rope_and_write_kv(q, k, v, pos, inv_freq, k_cache, v_cache, meta.slot_mapping)
    if quant and a.head_dim % 32 == 0:
        return paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, a.scale,
                                      quant=True)[1]
    o = paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, a.scale)
    return o.view(b, a.n_heads * a.head_dim)


def glu(g, u, h: torch.Tensor) -> torch.Tensor:
    """silu(h @ Wg.T) * (h @ Wu.T), h [N, H] already normed: one SwiGLU launch where it can."""
    if (g.raw is not None and u.raw is not None and g.qtype == u.qtype and h.shape[0] <= GEMV_MAX_N
            and g.bias is None and u.bias is None and split(g) == split(u)):
        return fused_glu(h, g.raw, u.raw, g.out_features, g.in_features, g.qtype, split=split(g))
    return F.silu(linear(g, h)) * linear(u, h)


@dataclass(frozen=True)
class QuantRows:
    """One block's products in the unfused step (batches above fused_rows) over the raw blocks; the
    same methods as dense_weights.DenseBlock, which FusedDecoder runs instead for dense_rows batches."""

    lin: BlockLinears
    products: DecodeProducts

    def qkv(self, h: torch.Tensor) -> list[torch.Tensor]:
        return self.products.qkv_rows(self.lin, h)

    def o_proj(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.lin.o, x)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        return self.products.down_rows(self.lin, glu(self.lin.gate, self.lin.up, h))


def step_products(model, int8_x: bool = True, batched_qkv: bool = True,
                  cuda_gemv: bool = True) -> DecodeProducts:
    """The launch choices of FusedDecoder / TPFusedDecoder(model, int8_x=, batched_qkv=): x quantized to
    int8 unless the model is float32 (run for exactness)."""
    int8 = int8_x and model.blocks[0].attn_norm.weight.dtype != torch.float32
    return DecodeProducts(int8_x=int8, int8_attn=int8, batched_qkv=batched_qkv, cuda_gemv=cuda_gemv)


class DecodeProducts:
    """The norm-fused step's launches for one model's (or shard's) linears.

    int8_x: the Q4_K/Q6_K products (gate/up: Q4_K) read x quantized to int8 per 32 (gemv_int8.py,
    gemv3_int8.py); ~1 % error per product on top of bf16's, as llama.cpp's MMVQ. int8_attn: q/k/v and
    o too (a bench may switch this part off alone). batched_qkv: above the norm-fused rows (5..64),
    q/k/v in one launch (batched_qkv.py) instead of three products. cuda_gemv: one token's Q4_K and
    split Q6_K q/k/v, o and down on the CUDA-C GEMVs where they compile (gemv_cuda.py), not the Triton
    gemv3_i8 / gemv_i8. The SwiGLU stays on Triton's glu_q4k_i8: a CUDA-C one (session 37) took 33.4 µs
    at the 7B's shape against its 24.8."""

    def __init__(self, int8_x: bool, int8_attn: bool, batched_qkv: bool = False, cuda_gemv: bool = False):
        self.int8_x, self.int8_attn, self.batched_qkv = int8_x, int8_attn, batched_qkv
        self.cuda_gemv = cuda_gemv

    def _gemv_i8(self, m, xq: torch.Tensor, xs: torch.Tensor, out: torch.Tensor | None,
                 dtype: torch.dtype) -> torch.Tensor:
        """m's product on x from quantize_x (+ out, in place, where given): gemv_cuda_i8 where cuda_gemv
        routes it (one token: Q4_K on GGUF's blocks, Q6_K in the split layout), else gemv_i8."""
        if self.cuda_gemv and gemv_cuda.routed(xq, m.raw, m.in_features, m.qtype, split(m)):
            return gemv_cuda.gemv_cuda_i8(xq, xs, m.raw, m.out_features, m.in_features, m.qtype, m.bias,
                                          residual=out, dtype=dtype, split=split(m))
        return gemv_i8(xq, xs, m.raw, m.out_features, m.in_features, m.qtype, m.bias, residual=out,
                       dtype=dtype, split=split(m))

    def fused_rows(self, blocks: list[BlockLinears], head) -> int:
        """The most rows the norm-fused step takes: I8_MAX_ROWS where every product (q/k/v, o, gate/up,
        down, head) runs on the int8 GEMVs, else GEMV_MAX_N (the float GEMVs' limit)."""
        if not (self.int8_x and self.int8_attn and self.head_i8(head)):
            return GEMV_MAX_N
        if not all(self.qkv_i8(lin) and self.down_i8(lin) for lin in blocks):
            return GEMV_MAX_N
        return max(I8_MAX_ROWS, GEMV_MAX_N)

    def check_layouts(self, blocks: list[BlockLinears], head) -> None:
        """ValueError where the norm-fused step would hand a split Q6_K weight to a float GEMV: split
        weights need int8_x and int8_attn (gemv_i8 / gemv3_i8 read them)."""
        if any(split(m) for lin in blocks for m in lin.all()) or split(head):
            if not (self.int8_x and self.int8_attn):
                raise ValueError("q6k_layout='split' needs the int8 GEMVs (int8_x; not float32 models)")

    def split_readers(self, blocks: list[BlockLinears], head) -> list:
        """The Q6_K weights that every kernel this step may hand them to reads in the split layout
        (q6k_layout="auto"): q/k/v and o on the int8 GEMVs (gemv3_i8 needs the biases to agree), down
        after the int8 SwiGLU, the head on gemv_i8. The unfused step's kernels read both layouts; the
        float GEMVs (fused_gemv, fused_glu, fused_gemv3) read GGUF blocks only."""
        if not (self.int8_x and self.int8_attn):
            return []
        found = []
        for lin in blocks:
            readers = []  # this block's products on the int8 kernels
            if self.qkv_i8(lin):
                readers += lin.qkv()
            if self.attn_i8(lin):
                readers.append(lin.o)
            if self.down_i8(lin):
                readers.append(lin.down)
            found += [m for m in readers if m.qtype == Q6_K]
        return found + ([head] if self.head_i8(head) and head.qtype == Q6_K else [])

    def attn_i8(self, lin: BlockLinears) -> bool:
        """q/k/v (when their biases agree) and o on the int8 GEMVs."""
        return self.int8_attn and all(m.qtype in I8_TYPES for m in (*lin.qkv(), lin.o))

    def qkv_i8(self, lin: BlockLinears) -> bool:
        """q/k/v in one gemv3_i8 launch: attn_i8, and their biases all present or all absent."""
        return self.attn_i8(lin) and len({m.bias is None for m in lin.qkv()}) == 1

    def glu_i8(self, lin: BlockLinears) -> bool:
        """gate/up on the int8 SwiGLU kernel: both Q4_K, rows a multiple of 32 (its quantized output)."""
        g, u = lin.gate, lin.up
        return self.int8_x and g.qtype == Q4_K and u.qtype == Q4_K and g.out_features % 32 == 0

    def down_i8(self, lin: BlockLinears) -> bool:
        """down on gemv_i8 (Q4_K / Q6_K) or gemv_legacy_i8 (Q5_0 / Q8_0), reading the int8 SwiGLU's
        quantized output."""
        return self.glu_i8(lin) and lin.down.qtype in DOWN_I8_TYPES

    def head_i8(self, m) -> bool:
        """The head on gemv_i8, the final RMSNorm inside the x quantization."""
        return self.int8_x and m.qtype in I8_TYPES

    def qkv(self, lin: BlockLinears, res: torch.Tensor, nrm: Norm) -> list[torch.Tensor]:
        """RMSNorm(res) * w -> [q, k, v], each [B, out_i]; one launch unless only some have a bias."""
        qkv, k_in = lin.qkv(), lin.q.in_features
        same_bias = len({m.bias is None for m in qkv}) == 1
        if self.qkv_i8(lin):
            xq, xs = quantize_x(res, norm=nrm)
            weights, splits = [(m.raw, m.out_features, m.qtype, m.bias) for m in qkv], tuple(map(split, qkv))
            if self.cuda_gemv and gemv_cuda.gemv3_routed(xq, weights, k_in, splits):
                return gemv_cuda.gemv3_cuda_i8(xq, xs, weights, k_in, res.dtype, split=splits)
            return gemv3_i8(xq, xs, weights, k_in, res.dtype, split=splits)
        if same_bias:
            weights = [(gguf_raw(m, "fused_gemv3"), m.out_features, m.qtype, m.bias) for m in qkv]
            return fused_gemv3(res, weights, k_in, norm=nrm)
        return [fused_gemv(res, gguf_raw(m, "fused_gemv"), m.out_features, m.in_features, m.qtype, m.bias,
                           norm=nrm) for m in qkv]

    def qkv_rows(self, lin: BlockLinears, h: torch.Tensor) -> list[torch.Tensor]:
        """The unfused step's q, k, v of h [B, H] (already normed): one batched_qkv launch for
        GEMV_MAX_N < B <= MM_MAX_N where it is on and qkv_one_launch chooses it (split Q6_K weights too:
        a flag each), else three products."""
        qkv = lin.qkv()
        if (self.batched_qkv and GEMV_MAX_N < h.shape[0] <= MM_MAX_N
                and all(m.raw is not None for m in qkv)):
            weights = [(m.raw, m.out_features, m.qtype, m.bias) for m in qkv]
            if qkv_one_launch(weights, h.shape[0], lin.q.in_features):
                return batched_qkv(h, weights, lin.q.in_features, split=tuple(split(m) for m in qkv))
        return [linear(m, h) for m in qkv]

    def o(self, lin: BlockLinears, x, res: torch.Tensor, partial: bool = False) -> torch.Tensor:
        """res [B, H] += x [B, heads * head_dim] @ Wo.T, in place; returns res. x: a tensor, or where
        attn_i8(lin) its quantize_x words and scales (attend(quant=True)). partial: res is left alone and
        the product alone comes back in a new tensor like res (a TP rank > 0's share of the all-reduce)."""
        m, out = lin.o, None if partial else res
        if self.attn_i8(lin):
            xq, xs = x if isinstance(x, tuple) else quantize_x(x)
            return self._gemv_i8(m, xq, xs, out, res.dtype)
        return fused_gemv(x, gguf_raw(m, "fused_gemv"), m.out_features, m.in_features, m.qtype, residual=out)

    def glu(self, lin: BlockLinears, res: torch.Tensor, nrm: Norm) -> tuple:
        """x = RMSNorm(res) * w -> (silu(x @ Wg.T) * (x @ Wu.T) [B, F], and that quantized for an int8
        down: (aq, as), else (None, None)). Q4_K gate/up with int8_x: x quantized once (one small kernel)."""
        g, u, dn = lin.gate, lin.up, lin.down
        if self.glu_i8(lin):
            xq, xs = quantize_x(res, norm=nrm)
            return glu_q4k_i8(xq, xs, g.raw, u.raw, g.out_features, g.in_features, res.dtype,
                              quant_out=dn.qtype in DOWN_I8_TYPES)
        y = fused_glu(res, gguf_raw(g, "fused_glu"), gguf_raw(u, "fused_glu"), g.out_features, g.in_features,
                      g.qtype, norm=nrm)
        return y, None, None

    def down(self, lin: BlockLinears, act: tuple, res: torch.Tensor, partial: bool = False) -> torch.Tensor:
        """res [B, H] += act @ Wdown.T in place; returns res. act from glu (int8 words when it quantized
        them). partial: as o's (the product alone, in a new tensor)."""
        y, aq, asc = act
        dn, out = lin.down, None if partial else res
        if aq is not None and dn.qtype in LEGACY_I8_TYPES:
            return gemv_legacy_i8(aq, asc, dn.raw, dn.out_features, dn.in_features, dn.qtype, residual=out,
                                  dtype=res.dtype)
        if aq is not None:
            return self._gemv_i8(dn, aq, asc, out, res.dtype)
        return fused_gemv(y, gguf_raw(dn, "fused_gemv"), dn.out_features, dn.in_features, dn.qtype,
                          residual=out)

    def down_rows(self, lin: BlockLinears, a: torch.Tensor) -> torch.Tensor:
        """The unfused step's down of a [B, F] (the SwiGLU output) -> [B, H]: a Q5_0 down of at most
        LEGACY_ROWS_MAX rows on gemv_legacy_i8 with int8_x (a quantized per 32) where mmq_legacy does not
        take it, else linear."""
        dn = lin.down
        if (self.int8_x and dn.qtype == Q5_0 and dn.raw is not None and a.shape[0] <= LEGACY_ROWS_MAX
                and not mmq_legacy_routed(dn.qtype, a, dn.raw, dn.out_features, dn.in_features)):
            aq, asc = quantize_x(a)
            return gemv_legacy_i8(aq, asc, dn.raw, dn.out_features, dn.in_features, dn.qtype, dn.bias,
                                  dtype=a.dtype)
        return linear(dn, a)

    def head(self, m, res: torch.Tensor, nrm: Norm) -> torch.Tensor:
        """RMSNorm(res) * w @ W_head.T -> [B, out] in res.dtype (m: the head, or this rank's rows)."""
        if self.head_i8(m):  # the final RMSNorm inside the x quantization
            xq, xs = quantize_x(res, norm=nrm)
            return gemv_i8(xq, xs, m.raw, m.out_features, m.in_features, m.qtype, m.bias, dtype=res.dtype,
                           split=split(m))
        # the final RMSNorm as one small kernel of its own: inside the head GEMV, each of its ~38k
        # programs would redo the RMS
        h = add_rmsnorm(None, res, nrm[0], nrm[1])
        return fused_gemv(h, gguf_raw(m, "fused_gemv"), m.out_features, m.in_features, m.qtype, m.bias)
