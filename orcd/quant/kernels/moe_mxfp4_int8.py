"""MXFP4 MoE GEMV with int8 activations (gpt-oss decode, 1-8 tokens): llama.cpp's MMVQ idea for MXFP4.

x comes quantized per 32 inputs (xquant.quantize_x: int8 words, dx per 32). An MXFP4 block (32 weights,
one E8M0 exponent e, 16 code bytes: byte j = element j in the low nibble, element 16 + j in the high one,
orcd/quant/mxfp4.py split_blocks_) is read as 4 int32 words. Each word's 8 nibbles become two words of 4
int8s by a table lookup (`_e2m1x2`): twice the E2M1 value, the integers 0, 1, 2, 3, 4, 6, 8, 12 and their
negatives (on CUDA: byte permutes `prmt` over the 16-entry table; under the interpreter the same bytes by
arithmetic). Word w's low nibbles are elements 4w..4w+3 (x word w), its high ones 16 + 4w.. (x word 4 + w):
two dp4a per code word, 8 per block, int32 sums. Per block: W . x = sum * dx * 2 ** (e - 128) (the table
is E2M1 * 2, ggml's half scale 2 ** (e - 128) takes it back), all exact but x's int8 rounding:
|error| <= sum over blocks of 2 ** (e - 127) * sum |E2M1| * dx / 2.

Programs, epilogues and output rows as moe_gemv.py's kernel: one program per (output row, BN weight rows);
GLU (gate + up, one row per pair, clamped SwiGLU) or down (slots = top_k: a token's k pairs summed, routed
weights, optional residual added in place). quant_out (GLU, opt-in: GptOssDecoder(fuse_quant=True)): the
SwiGLU output rounded to out_dtype and quantized per 32 in the epilogue, as quantize_x would (the down
GEMV's input; one launch fewer); BN a multiple of 32 so each program holds whole blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.moe_gemv import Split, _e8m0_scale, _epilogue
from orcd.quant.kernels.xquant import asm_ok, dp4a, quantize_x, store_quant32

# (BN weight rows, KB blocks per step, num_warps). One H200, gpt-oss-20b's shapes, 24 layers from a CUDA
# graph (bench/kernels/gpt_oss_i8_sweep.py; bench/results/gpt_oss_s28/), µs a layer at 1 / 4 / 8 tokens:
# gate/up (8, 16, 4) 22.0 / 62.2 / 115.7 -> (4, 16, 1) 19.5 / 57.6 / 107.4 (within 1.2 µs of each
# count's best; KB kept at 16, the quantized launch's, so that both sum the same KB-wide partials);
# down (8, 16, 4) 20.9 / 45.3 / 71.7 -> (4, 32, 2) 13.6 / 37.1 / 66.6, the best at every count.
I8_MOE_LAUNCH = (4, 16, 1)
I8_DOWN_LAUNCH = (4, 32, 2)
# the gate/up launch with the quantized epilogue: BN whole 32-blocks, KB as I8_MOE_LAUNCH's (the same
# per-row sums of KB-wide partials). Same sweep: 22.5 µs at 1 token, the best BN 32 / 64 launch 22.2.
I8_GLU_QUANT_LAUNCH = (32, 16, 4)
# twice the E2M1 values as int8 by nibble (bit 3: sign): 0x03020100, 0x0C080604 (0..3, 4 6 8 12), their
# negatives 0xFDFEFF00, 0xF4F8FAFC; prmt picks bytes by 3-bit selectors, then by sign, then de-interleaves
PRMT_PTX = """{
.reg .b32 sa, sb, p0, p1, n0, n1, l0, l1, sg, t0, t1;
and.b32 sa, $2, 0x7777;
shr.b32 sb, $2, 16;
and.b32 sb, sb, 0x7777;
mov.b32 p0, 0x03020100;
mov.b32 p1, 0x0C080604;
mov.b32 n0, 0xFDFEFF00;
mov.b32 n1, 0xF4F8FAFC;
prmt.b32 l0, p0, p1, sa;
prmt.b32 t0, n0, n1, sa;
prmt.b32 l1, p0, p1, sb;
prmt.b32 t1, n0, n1, sb;
shr.b32 sg, $2, 1;
and.b32 sg, sg, 0x44444444;
or.b32 sg, sg, 0x32103210;
prmt.b32 l0, l0, t0, sg;
shr.b32 sg, sg, 16;
prmt.b32 l1, l1, t1, sg;
mov.b32 sa, 0x6420;
mov.b32 sb, 0x7531;
prmt.b32 $0, l0, l1, sa;
prmt.b32 $1, l0, l1, sb;
}"""
_PRMT = tl.constexpr(PRMT_PTX)  # a jit function reads only constexpr globals


@triton.jit
def _nib(q, sh: tl.constexpr):
    """Byte of the int8 2 * E2M1 value of the nibble at bit sh of q (interpreter path), in the low 8 bits."""
    v = (q >> sh) & 0xF
    m = v & 7
    b = m & 3
    big = m >> 2
    mag = m + big * (b + 2 * (b & (b >> 1)))  # 0, 1, 2, 3, 4, 6, 8, 12
    return tl.where(v >= 8, -mag, mag) & 0xFF


@triton.jit
def _e2m1x2(q, ASM: tl.constexpr):
    """int32 code words (8 nibbles: byte i = element i low, element 16 + i high) -> (lo, hi): int32 words
    of the 4 low nibbles' and the 4 high nibbles' 2 * E2M1 values as int8 (byte i for byte i of q)."""
    if ASM:
        return tl.inline_asm_elementwise(_PRMT, "=r,=r,r", [q], dtype=(tl.int32, tl.int32), is_pure=True,
                                         pack=1)
    lo = _nib(q, 0) | (_nib(q, 8) << 8) | (_nib(q, 16) << 16) | (_nib(q, 24) << 24)
    hi = _nib(q, 4) | (_nib(q, 12) << 8) | (_nib(q, 20) << 16) | (_nib(q, 28) << 24)
    return lo, hi


@triton.jit
def _block_dots_i8(s_ptr, q_ptr, rows, nmask, blk, bmask, n_blocks, xlo, xhi, dx, ASM: tl.constexpr):
    """rows [BN] int64 (expert * N + n), blk [KB]; xlo / xhi [KB, 4] int32 x words of each block's first
    and second 16 inputs, dx [KB] -> [BN, KB] fp32: W[row, block] . x[block]."""
    w = tl.arange(0, 4)
    m2 = nmask[:, None] & bmask[None, :]
    qp = q_ptr + (rows[:, None, None] * n_blocks + blk[None, :, None]) * 4 + w[None, None, :]
    q = tl.load(qp, mask=m2[:, :, None], other=0)  # [BN, KB, 4] code words
    s = tl.load(s_ptr + rows[:, None] * n_blocks + blk[None, :], mask=m2, other=0)
    lo, hi = _e2m1x2(q, ASM)
    isum = tl.sum(dp4a(lo, xlo[None, :, :], ASM) + dp4a(hi, xhi[None, :, :], ASM), axis=2)
    return isum.to(tl.float32) * (dx[None, :] * (_e8m0_scale(s) * (1.0 / 32768.0)))


@triton.jit
def _moe_i8_kernel(xq_ptr, xs_ptr, ids_ptr, sg_ptr, qg_ptr, su_ptr, qu_ptr, bg_ptr, bu_ptr, rw_ptr, out_ptr,
                   oq_ptr, os_ptr, N, K, alpha, limit, A_DIV: tl.constexpr, SLOTS: tl.constexpr,
                   GLU: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RW: tl.constexpr, BN: tl.constexpr,
                   KB: tl.constexpr, RES: tl.constexpr, ASM: tl.constexpr, QOUT: tl.constexpr = 0):
    r = tl.program_id(0)  # output row: a pair (SLOTS 1) or a token (SLOTS top_k)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < N
    b = tl.arange(0, KB)
    w = tl.arange(0, 4)
    n_blocks = K // 32
    acc_g = tl.zeros([BN, KB], dtype=tl.float32)
    acc_u = tl.zeros([BN, KB], dtype=tl.float32)
    for blk0 in range(0, n_blocks, KB):
        blk = blk0 + b
        bmask = blk < n_blocks
        for s in tl.static_range(SLOTS):
            p = r * SLOTS + s
            rows = tl.load(ids_ptr + p).to(tl.int64) * N + n
            xr = (p // A_DIV).to(tl.int64)
            xw = xq_ptr + xr * (K // 4) + blk[:, None] * 8 + w[None, :]
            xlo = tl.load(xw, mask=bmask[:, None], other=0)
            xhi = tl.load(xw + 4, mask=bmask[:, None], other=0)
            dx = tl.load(xs_ptr + (xr * n_blocks + blk) * 4, mask=bmask, other=0.0)
            d = _block_dots_i8(sg_ptr, qg_ptr, rows, nmask, blk, bmask, n_blocks, xlo, xhi, dx, ASM)
            if HAS_RW:
                d = d * tl.load(rw_ptr + p).to(tl.float32)
            acc_g += d
            if GLU:
                acc_u += _block_dots_i8(su_ptr, qu_ptr, rows, nmask, blk, bmask, n_blocks, xlo, xhi, dx, ASM)
    if QOUT:
        _glu_quant_epilogue(acc_g, acc_u, r, n, nmask, ids_ptr, bg_ptr, bu_ptr, out_ptr, oq_ptr, os_ptr, N,
                            alpha, limit, HAS_BIAS, BN)
    else:
        _epilogue(acc_g, acc_u, r, n, nmask, ids_ptr, bg_ptr, bu_ptr, rw_ptr, out_ptr, N, alpha, limit, SLOTS,
                  GLU, HAS_BIAS, HAS_RW, RES)


@triton.jit
def _glu_quant_epilogue(acc_g, acc_u, r, n, nmask, ids_ptr, bg_ptr, bu_ptr, out_ptr, oq_ptr, os_ptr, N, alpha,
                        limit, HAS_BIAS: tl.constexpr, BN: tl.constexpr):
    """GLU pair r's outputs n [BN] (BN / 32 whole blocks): moe_gemv._epilogue's clamped SwiGLU, op for op,
    rounded to out's dtype, quantized per 32 into oq (words [P, N / 4]) and os (scales [P, N / 32, 4])."""
    e = tl.load(ids_ptr + r).to(tl.int64)
    y = tl.sum(acc_g, axis=1)  # [BN]
    if HAS_BIAS:
        y += tl.load(bg_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)
    u = tl.sum(acc_u, axis=1)
    if HAS_BIAS:
        u += tl.load(bu_ptr + e * N + n, mask=nmask, other=0.0).to(tl.float32)
    g = tl.minimum(y, limit)
    u = tl.minimum(tl.maximum(u, -limit), limit)
    y = (g * tl.sigmoid(g * alpha) * (u + 1)).to(out_ptr.dtype.element_ty).to(tl.float32)
    blk = tl.program_id(1) * (BN // 32) + tl.arange(0, BN // 32)
    r64 = r.to(tl.int64)
    store_quant32(tl.reshape(y, (BN // 32, 8, 4)), oq_ptr + r64 * (N // 4), os_ptr + r64 * (N // 8), blk,
                  blk < N // 32)


def _words(w: Split) -> Split:
    """(scales, codes uint8 [E, N, K / 2]) -> (scales, codes as int32 [E, N, K / 8])."""
    return w[0], w[1].view(torch.int32)


def moe_gemv_i8(xq: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, w_gate: Split, w_up: Split | None,
                b_gate: torch.Tensor | None, b_up: torch.Tensor | None, route_w: torch.Tensor | None,
                top_k: int, slots: int = 1, out_dtype: torch.dtype = torch.bfloat16, alpha: float = 1.702,
                limit: float = 7.0, launch: tuple[int, int, int] | None = None,
                residual: torch.Tensor | None = None, quant_out: bool = False):
    """moe_gemv with x given quantized: xq = quantize_x(x) of x [T, K] (GLU: per token, read by
    pair // top_k) or [P, K] (down: per pair). Other arguments and the result as moe_gemv's; the output
    dtype is out_dtype (residual's when given). quant_out (GLU only): returns quantize_x of the GLU output
    [P, N] instead, (words [P, N / 4], scales [P, N / 32, 4]); launch BN a multiple of 32."""
    glu = w_up is not None
    if glu and slots != 1:
        raise ValueError("the GLU projection writes one row per pair (slots 1)")
    launch = launch or (I8_GLU_QUANT_LAUNCH if quant_out else I8_MOE_LAUNCH if glu else I8_DOWN_LAUNCH)
    if quant_out and (not glu or launch[0] % 32 or w_gate[0].shape[1] % 32):
        raise ValueError("quant_out: the GLU projection, N and BN multiples of 32")
    words, scales = xq
    n_out, k = w_gate[0].shape[1], words.shape[1] * 4
    p = ids.numel()
    if residual is not None and (glu or tuple(residual.shape) != (p // slots, n_out)):
        raise ValueError(f"residual must be [{p // slots}, {n_out}] and the projection not the GLU one")
    out = residual if residual is not None else torch.empty((p // slots, n_out), dtype=out_dtype,
                                                            device=words.device)
    wg = _words(w_gate)
    wu = _words(w_up) if glu else wg  # never read unless GLU
    dummy = w_gate[0]
    oq = torch.empty((p, n_out // 4), dtype=torch.int32, device=words.device) if quant_out else dummy
    os_ = torch.empty((p, n_out // 32, 4), dtype=torch.float32, device=words.device) if quant_out else dummy
    bn, kb, warps = launch
    _moe_i8_kernel[(p // slots, triton.cdiv(n_out, bn))](
        words, scales, ids, *wg, *wu, b_gate if b_gate is not None else dummy,
        b_up if b_up is not None else dummy, route_w if route_w is not None else dummy, out, oq, os_, n_out,
        k, alpha, limit, A_DIV=top_k if glu else 1, SLOTS=slots, GLU=glu, HAS_BIAS=b_gate is not None,
        HAS_RW=route_w is not None, BN=bn, KB=kb, RES=residual is not None, ASM=asm_ok(words.device),
        num_warps=warps, **({"QOUT": 1} if quant_out else {}))
    return (oq, os_) if quant_out else out


def moe_mlp_i8(h: torch.Tensor, ids: torch.Tensor, gate: Split, up: Split, down: Split, biases: tuple,
               route_w: torch.Tensor, top_k: int, residual: torch.Tensor, hq: tuple | None = None,
               fuse_quant: bool = False) -> torch.Tensor:
    """The expert MLP of a decode step, int8 activations: residual [T, H] += sum over each token's k
    experts of route_w * (down(clamped SwiGLU(gate h, up h)) + b_down). h [T, H]; ids, route_w [T * k];
    biases (b_gate, b_up, b_down) [E, *] or None each. 4 launches: quantize h, gate/up, quantize, down;
    hq = quantize_x(h) given (norm_route(quant=True)): 3; fuse_quant (F % 32 == 0): the SwiGLU output
    quantized in the gate/up epilogue, one fewer."""
    bg, bu, bd = biases
    xq = hq if hq is not None else quantize_x(h)
    if fuse_quant and gate[0].shape[1] % 32 == 0:
        aq = moe_gemv_i8(xq, ids, gate, up, bg, bu, None, top_k, out_dtype=h.dtype, quant_out=True)
    else:
        aq = quantize_x(moe_gemv_i8(xq, ids, gate, up, bg, bu, None, top_k, out_dtype=h.dtype))  # [P, F]
    return moe_gemv_i8(aq, ids, down, None, bd, None, route_w, top_k, slots=top_k, residual=residual)
