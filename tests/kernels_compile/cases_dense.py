"""Compile cases of the dense models' kernels, bf16: qwen2.5-7B's fused decode step through DecodeProducts
and QuantRows (the launch sites FusedDecoder runs), Gemma 3 270M's GLU/GEMV calls as fused_gemma3.py makes
them, and the wrappers these do not reach. Weights are torch.empty of the real byte sizes (never read:
nothing runs). CORE groups run in CI; EXTENDED ones (the other NT tables, rows and types) on request."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.batched_fused import batched_fused
from orcd.quant.kernels.batched_linear import batched_linear
from orcd.quant.kernels.batched_qkv import batched_qkv
from orcd.quant.kernels.decode_ops import silu_mul
from orcd.quant.kernels.dequant_kernel import dequantize_raw
from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu, fused_linear
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
from orcd.quant.kernels.invariant_linear import DENSE, invariant_linear
from orcd.quant.kernels.layout import row_bytes
from orcd.quant.kernels.mmq import mmq_linear
from orcd.quant.kernels.q6k_split import split_linear
from orcd.quant.kernels.xquant import quantize_x
from orcd.runner.block_linears import BlockLinears
from orcd.runner.block_linears import split as is_split
from orcd.runner.decode_products import DecodeProducts, QuantRows
from orcd.runner.decode_products import linear as decode_linear

H, FFN, Q_OUT, KV_OUT, VOCAB = 3584, 18944, 3584, 512, 152064  # qwen2.5-7B
BF16 = torch.bfloat16


def raw(qt: Q, out: int, k: int) -> torch.Tensor:
    """uint8 [out, row_bytes] of never-read GGUF blocks."""
    return torch.empty((out, row_bytes(qt, k)), dtype=torch.uint8)


def linear(qt: Q, out: int, k: int, bias: bool = False) -> SimpleNamespace:
    """A QuantLinear as the kernels read it (raw, out_features, in_features, qtype, bias)."""
    return SimpleNamespace(raw=raw(qt, out, k), out_features=out, in_features=k, qtype=qt,
                           bias=torch.zeros(out, dtype=BF16) if bias else None)


def block(down: Q) -> BlockLinears:
    """One Q4_K_M block: q, k Q4_K and v Q6_K with qwen2's biases, o and gate/up Q4_K, down of the type
    given (Q4_K or Q6_K; Q5_0 / Q8_0 where the FFN width is not whole super-blocks)."""
    return BlockLinears(q=linear(Q.Q4_K, Q_OUT, H, True), k=linear(Q.Q4_K, KV_OUT, H, True),
                        v=linear(Q.Q6_K, KV_OUT, H, True), o=linear(Q.Q4_K, H, Q_OUT),
                        gate=linear(Q.Q4_K, FFN, H), up=linear(Q.Q4_K, FFN, H), down=linear(down, H, FFN))


def step(int8: bool, rows: tuple, downs: tuple, head: bool = True, split: bool = False,
         partial: bool = False) -> None:
    """The norm-fused step's products (q/k/v, o, gate/up, down) at each row count, then the head; split:
    the Q6_K weights in q6k_layout='split' (DecodeProducts reads QuantLinear.layout); partial: o and down
    as a TP rank > 0 runs them (the product alone, no residual)."""
    nrm = (torch.zeros(H, dtype=BF16), 1e-6)
    prod = DecodeProducts(int8_x=int8, int8_attn=int8)
    for down in downs:
        lin = block(down)
        for m in lin.all():
            m.layout = "split" if split and m.qtype == Q.Q6_K else "gguf"
        for n in rows:
            res = torch.zeros(n, H, dtype=BF16)
            prod.qkv(lin, res, nrm)
            prod.o(lin, torch.zeros(n, Q_OUT, dtype=BF16), res, partial)
            prod.down(lin, prod.glu(lin, res, nrm), res, partial)
    if head:
        m = linear(Q.Q6_K, VOCAB, H)
        m.layout = "split" if split else "gguf"
        prod.head(m, torch.zeros(1, H, dtype=BF16), nrm)


def q6k_split(rows: tuple) -> None:
    """q6k_layout='split' (issue 16): the int8 step with v, down and the head split (gemv3_i8's SC,
    gemv_i8's SPLIT), and the split dequantize (QuantLinear.forward / dense_weight)."""
    step(True, rows, (Q.Q6_K,), split=True)
    dequantize_raw(raw(Q.Q6_K, 1024, H), Q.Q6_K, 1024, H, BF16, split=True)


def q6k_split_rows(rows: tuple) -> None:
    """q6k_layout='split' above the norm-fused rows and in QuantLinear.forward (q6k_split.split_linear):
    the unfused step with v, down and the head split (batched_qkv's Q6SC, batched_linear's Q6S), the
    float GEMV's Q6S at 1 row (ffn_down; the large-matrix shape at the head), the batch-invariant GEMM."""
    unfused_rows(rows, split=True)
    head = linear(Q.Q6_K, VOCAB, H)
    head.layout = "split"
    for n in (1, *rows):
        decode_linear(head, torch.zeros(n, H, dtype=BF16))
    split_linear(torch.zeros(1, FFN, dtype=BF16), raw(Q.Q6_K, H, FFN), H, FFN)
    invariant_linear(torch.zeros(8, H, dtype=BF16), raw(Q.Q6_K, 1024, H), Q.Q6_K, 1024, split=True)


def q6k_split_fused() -> None:
    """The split layout in the norm-fused kernels at 1 and 8 rows: fused_glu (the GEMV's DUAL Q6S, then
    batched_fused's GLU), batched_fused with the norm and the residual."""
    g = raw(Q.Q6_K, FFN, H)
    nrm = (torch.zeros(H, dtype=BF16), 1e-6)
    for n in (1, 8):
        fused_glu(torch.zeros(n, H, dtype=BF16), g, g, FFN, H, Q.Q6_K, norm=nrm, split=True)
    batched_fused(torch.zeros(8, H, dtype=BF16), raw(Q.Q6_K, KV_OUT, H), KV_OUT, H, Q.Q6_K, nrm,
                  torch.zeros(8, KV_OUT, dtype=BF16), split=True)


def unfused_rows(rows: tuple, split: bool = False) -> None:
    """Above the norm-fused rows: batched_qkv (and q/k/v as three products), MMQ (float_w) and
    batched_linear products (split: v and down in q6k_layout='split')."""
    for n in rows:
        lin = block(Q.Q6_K)
        for m in lin.all():
            m.layout = "split" if split and m.qtype == Q.Q6_K else "gguf"
        rs = QuantRows(lin, DecodeProducts(int8_x=True, int8_attn=True, batched_qkv=True))
        h = torch.zeros(n, H, dtype=BF16)
        rs.qkv(h)  # at <= 32 rows three products (batched_qkv.qkv_one_launch), so also the one launch:
        weights = [(m.raw, m.out_features, m.qtype, m.bias) for m in lin.qkv()]
        batched_qkv(h, weights, H, split=tuple(is_split(m) for m in lin.qkv()))
        rs.o_proj(torch.zeros(n, Q_OUT, dtype=BF16))
        rs.mlp(h)


def int8_tables(nts: tuple, types: tuple = (Q.Q4_K, Q.Q6_K), glu: bool = True) -> None:
    """I8_LAUNCH's rows per program NT for the Q4_K/Q6_K GEMV (+ residual) and the SwiGLU."""
    g = raw(Q.Q4_K, FFN, H)
    for nt in nts:
        xq, xs = quantize_x(torch.zeros(nt, H, dtype=BF16))
        for qt in types:
            gemv_i8(xq, xs, raw(qt, Q_OUT, H), Q_OUT, H, qt, residual=torch.zeros(nt, Q_OUT, dtype=BF16))
        if glu:
            glu_q4k_i8(xq, xs, g, g, FFN, H, BF16)


def int8_decode() -> None:
    """One row through the int8 products (NT 1), the SwiGLU at BO 32 quantizing its output in its
    epilogue (QOUT: not the default launch, kept available), the Q4_K GEMV at NT 8."""
    step(True, (1,), (Q.Q6_K,), head=False)
    xq, xs = quantize_x(torch.zeros(1, H, dtype=BF16))
    g = raw(Q.Q4_K, FFN, H)
    glu_q4k_i8(xq, xs, g, g, FFN, H, BF16, launch=(8, 32, 4))
    int8_tables((8,), (Q.Q4_K,), glu=False)


def legacy_downs(rows: tuple) -> None:
    """Q5_0 and Q8_0 downs (the 72B's: llama.cpp's fallbacks for an FFN width that is not a multiple of
    256) after the int8 SwiGLU: gemv_legacy_i8 through DecodeProducts.down, NT per the row count, added
    into the residual and (a TP rank > 0) alone; the unfused step's 8-row Q5_0 down (down_rows)."""
    step(True, rows, (Q.Q5_0, Q.Q8_0), head=False)
    step(True, rows, (Q.Q5_0, Q.Q8_0), head=False, partial=True)
    if 8 in rows:
        prod = DecodeProducts(int8_x=True, int8_attn=True)
        prod.down_rows(block(Q.Q5_0), torch.zeros(8, FFN, dtype=BF16))


def gemma3_products(rows: tuple) -> None:
    """Gemma 3 270M (H 640, FFN 2048, Q8_0), as fused_gemma3.py calls them: q GEMV with the norm, the
    GELU GLU with the norm, o added into the residual (GEMVs at 1 row, batched_fused above GEMV_MAX_N)."""
    hid, ffn = 640, 2048
    nrm = (torch.zeros(hid, dtype=BF16), 1e-6)
    g, w = raw(Q.Q8_0, ffn, hid), raw(Q.Q8_0, 1024, hid)
    for n in rows:
        x = torch.zeros(n, hid, dtype=BF16)
        fused_glu(x, g, g, ffn, hid, Q.Q8_0, norm=nrm, gelu=True)
        fused_gemv(x, w, 1024, hid, Q.Q8_0, norm=nrm)
        fused_gemv(torch.zeros(n, 1024, dtype=BF16), raw(Q.Q8_0, hid, 1024), hid, 1024, Q.Q8_0,
                   residual=torch.zeros(n, hid, dtype=BF16))


def prefill_products() -> None:
    """Prefill: dequantize_raw (then cuBLAS), MMQ with int8 x, the batch-invariant GEMM (dense weight)."""
    w = raw(Q.Q4_K, 1024, H)
    dequantize_raw(w, Q.Q4_K, 1024, H, BF16)
    mmq_linear(torch.zeros(32, H, dtype=BF16), w, 1024, H, Q.Q4_K)
    invariant_linear(torch.zeros(8, H, dtype=BF16), torch.zeros(1024, H, dtype=BF16), DENSE)


def dense_batched() -> None:
    """8 rows (batched_qkv, MMQ float_w, batched_linear), Gemma's products at 1 row and 8 (batched_fused
    with the norm, GLU and residual), the prefill kernels, the dense copies' SwiGLU (silu_mul)."""
    unfused_rows((8,))
    silu_mul(torch.zeros(8, 2 * FFN, dtype=BF16))
    gemma3_products((1, 8))
    prefill_products()


def every_type() -> None:
    """Each GEMV type (Q8_0, Q5_0, Q4_K, Q6_K) through fused_linear at 1 and 8 rows, fused_glu (SiLU) at 1
    and 8, dequantize_raw, the batch-invariant GEMM, batched_linear with float32 x, MMQ Q6_K."""
    for qt in (Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K):
        w, g = raw(qt, 1024, H), raw(qt, 1152, H)
        for n in (1, 8):
            fused_linear(torch.zeros(n, H, dtype=BF16), w, 1024, H, qt, torch.zeros(1024, dtype=BF16))
            fused_glu(torch.zeros(n, H, dtype=BF16), g, g, 1152, H, qt)
        dequantize_raw(w, qt, 1024, H, BF16)
        invariant_linear(torch.zeros(8, H, dtype=BF16), w, qt, 1024)
        batched_linear(torch.zeros(8, H), w, 1024, H, qt)
    for float_w in (False, True):
        mmq_linear(torch.zeros(32, H, dtype=BF16), raw(Q.Q6_K, 1024, H), 1024, H, Q.Q6_K, float_w=float_w)


CORE = {"int8_decode": int8_decode, "dense_batched": dense_batched, "q6k_split": lambda: q6k_split((1,)),
        "q6k_split_batched": lambda: q6k_split_rows((8,)), "legacy_downs": lambda: legacy_downs((1,))}
EXTENDED = {"int8_rows_2_4": lambda: step(True, (2, 4), (Q.Q6_K, Q.Q4_K)),
            "int8_tables": lambda: int8_tables((1, 2, 4, 8)),
            "legacy_downs_rows": lambda: legacy_downs((2, 4, 8)),
            "float_decode": lambda: step(False, (1, 4), (Q.Q6_K, Q.Q4_K)),
            "unfused_rows_64": lambda: unfused_rows((64,)), "every_type": every_type,
            "q6k_split_rows": lambda: q6k_split((2, 4, 8)),
            "q6k_split_rows_64": lambda: q6k_split_rows((64,)), "q6k_split_fused": q6k_split_fused}
