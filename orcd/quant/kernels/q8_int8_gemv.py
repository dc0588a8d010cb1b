"""Q8_0 decode GEMVs with int8 activations (gpt-oss attention: q, k, v in one launch; o + the residual).

x comes quantized per 32 inputs (xquant.quantize_x: int8 words, dx per 32; with norm=, RMSNorm(x) * w is
what gets quantized, so the attention norm costs no launch of its own). A Q8_0 block (34 bytes: fp16 d,
32 int8) is only 2-byte aligned: its 8 words are read as halfword pairs (gemv_int8._word). Per block
d * dx * dp4a-sum of the 8 words: exact but x's int8 rounding,
|error| <= sum over blocks |d| * sum |q| * dx / 2.

One program per (BO weight rows of one matrix, token): programs 0..na-1 take the first matrix, the next
nb the second, the rest the third (one launch for q, k, v, as gemv3_int8.py does for the K-quants).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.gemv_int8 import _word
from orcd.quant.kernels.xquant import asm_ok, dp4a

# (BO rows per program, G blocks per K step, num_warps). One H200, gpt-oss-20b's q|k|v (4096 + 2 x 512
# rows, K 2880) and o (2880 x 4096 + residual), 24 layers from a CUDA graph (bench/kernels/
# gpt_oss_i8_sweep.py; bench/results/gpt_oss_s28/), µs a layer at 1 / 4 tokens: (4, 16, 4) q|k|v 11.5 /
# 37.0, o 11.7 / 40.1 -> (2, 32, 1) 8.2 / 21.5 and 7.9 / 21.2 (the best or within 0.2 µs of it)
Q8_I8_LAUNCH = (2, 32, 1)


@triton.jit
def _q8_rows(pid, t, xq, xs, w16, y_ptr, OUT, K, b_ptr, HAS_BIAS: tl.constexpr, RES: tl.constexpr,
             BO: tl.constexpr, G: tl.constexpr, ASM: tl.constexpr):
    """y[t, rows] (+)= W[rows] . x[t] (+ b[rows]) for rows pid * BO + [0, BO) of one Q8_0 matrix."""
    rows = pid * BO + tl.arange(0, BO)
    rmask = rows < OUT
    nb = K // 32
    w = tl.arange(0, 8)[None, None, :]
    acc = tl.zeros([BO, G], dtype=tl.float32)
    for blk0 in range(0, nb, G):
        blk = blk0 + tl.arange(0, G)
        m = rmask[:, None] & (blk < nb)[None, :]
        base = (rows.to(tl.int64)[:, None] * nb + blk[None, :]) * 17  # halfword offset of the block
        d = tl.load(w16 + base, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
        words = _word(w16, base[:, :, None] + 1 + 2 * w, m[:, :, None])  # [BO, G, 8]
        bm = blk < nb
        xw = tl.load(xq + t * (K // 4) + blk[:, None] * 8 + tl.arange(0, 8)[None, :], mask=bm[:, None],
                     other=0)  # [G, 8]
        dx = tl.load(xs + (t * nb + blk) * 4, mask=bm, other=0.0)
        isum = tl.sum(dp4a(words, xw[None, :, :], ASM), axis=2)
        acc += isum.to(tl.float32) * d * dx[None, :]
    y = tl.sum(acc, axis=1)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    yp = y_ptr + t * OUT + rows
    if RES:
        y += tl.load(yp, mask=rmask, other=0.0).to(tl.float32)
    tl.store(yp, y.to(y_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _q8_i8_kernel(xq, xs, K, wa, ya, OA, ba, wb, yb, OB, bb, wc, yc, OC, bc, NW: tl.constexpr,
                  HAS_BIAS: tl.constexpr, RES: tl.constexpr, BO: tl.constexpr, G: tl.constexpr,
                  ASM: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.program_id(1).to(tl.int64)  # the token
    na = tl.cdiv(OA, BO)
    nb = tl.cdiv(OB, BO)
    if pid < na:
        _q8_rows(pid, t, xq, xs, wa, ya, OA, K, ba, HAS_BIAS, RES, BO, G, ASM)
    elif NW > 1:
        if pid < na + nb:
            _q8_rows(pid - na, t, xq, xs, wb, yb, OB, K, bb, HAS_BIAS, RES, BO, G, ASM)
        else:
            _q8_rows(pid - na - nb, t, xq, xs, wc, yc, OC, K, bc, HAS_BIAS, RES, BO, G, ASM)


def q8_gemv_i8(xq: torch.Tensor, xs: torch.Tensor, weights: list, in_features: int, dtype: torch.dtype,
               residual: torch.Tensor | None = None, launch: tuple[int, int, int] | None = None):
    """x from quantize_x (xq [N, K / 4], xs [N, K / 32, 4]); weights: 1 or 3 x (raw uint8 [out_i, K / 32 * 34]
    Q8_0, out_i, bias_i [out_i] or None: all or none) -> [y_i [N, out_i]] in dtype. residual [N, out_0]
    (one weight only): the product is added into it in place and [residual] returned."""
    if len(weights) not in (1, 3) or (residual is not None and len(weights) != 1):
        raise ValueError("one weight (optionally with a residual) or three (q, k, v)")
    n = xq.shape[0]
    bo, g, warps = launch or Q8_I8_LAUNCH
    g = min(g, triton.next_power_of_2(in_features // 32))
    args, ys, nprog = [], [], 0
    for raw, out_f, bias in weights:
        y = residual if residual is not None else torch.empty((n, out_f), dtype=dtype, device=xq.device)
        ys.append(y)
        args.append((raw.view(-1).view(torch.int16), y, out_f, bias))
        nprog += triton.cdiv(out_f, bo)
    args += [args[0]] * (3 - len(args))  # slots past NW: never read
    _q8_i8_kernel[(nprog, n)](xq, xs, in_features, *[a for slot in args for a in slot], NW=len(weights),
                              HAS_BIAS=weights[0][2] is not None, RES=residual is not None, BO=bo, G=g,
                              ASM=asm_ok(xq.device), num_warps=warps)
    return ys
