"""Attention's q, k, v products in one launch with int8 x (gemv_int8.py's programs; Q4_K or Q6_K each):
programs 0..na-1 compute q, the next nb k, the rest v, all from the same quantized x; each program
takes NT tokens (int8_launch.tokens_per_program), so N <= NT rows read each weight once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import _views, launch_opts
from orcd.quant.kernels.gemv_int8 import gemv_i8_program
from orcd.quant.kernels.int8_launch import i8_launch
from orcd.quant.kernels.layout import q6k_views
from orcd.quant.kernels.xquant import asm_ok

BO3 = 4  # rows per program for all three


@triton.jit
def _gemv3_i8_kernel(xq, xs, N, K, a8, a16, a32, ya, OA, rba, ba, b8, b16, b32, yb, OB, rbb, bb,
                     c8, c16, c32, yc, OC, rbc, bc, QA: tl.constexpr, GA: tl.constexpr,
                     QB: tl.constexpr, GB: tl.constexpr, QC: tl.constexpr, GC: tl.constexpr, BO: tl.constexpr,
                     NT: tl.constexpr, ASM: tl.constexpr, HAS_BIAS: tl.constexpr, PDL: tl.constexpr = 0,
                     SA: tl.constexpr = False, SB: tl.constexpr = False, SC: tl.constexpr = False):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    na = tl.cdiv(OA, BO)
    nb = tl.cdiv(OB, BO)
    if pid < na:
        gemv_i8_program(pid, n, N, xq, xs, a8, a16, a32, ya, OA, K, rba, OA, ba, QA, GA, BO, NT, ASM,
                        HAS_BIAS, False, PDL, SA)
    elif pid < na + nb:
        gemv_i8_program(pid - na, n, N, xq, xs, b8, b16, b32, yb, OB, K, rbb, OB, bb, QB, GB, BO, NT, ASM,
                        HAS_BIAS, False, PDL, SB)
    else:
        gemv_i8_program(pid - na - nb, n, N, xq, xs, c8, c16, c32, yc, OC, K, rbc, OC, bc, QC, GC, BO, NT,
                        ASM, HAS_BIAS, False, PDL, SC)


def gemv3_i8(xq: torch.Tensor, xs: torch.Tensor, weights: list, in_features: int,
             dtype: torch.dtype, bo: int = BO3, split: tuple = (False, False, False),
             warps: int = 4) -> list[torch.Tensor]:
    """x from quantize_x; weights: 3 x (raw [out_i, row_bytes_i], out_i, qtype_i in (Q4_K, Q6_K), bias_i:
    all or none) -> [y_i [N, out_i]] in dtype. bo: rows per program (all three). split: per weight, Q6_K
    in layout.split_q6_k's layout. warps: per program."""
    n = xq.shape[0]
    args, consts, ys, nprog = [], {}, [], 0
    for j, (raw, out_f, qtype, bias) in enumerate(weights):
        qt = int(qtype)
        if split[j] and qt != 14:
            raise ValueError(f"the split layout is Q6_K's (14), not type {qt}")
        y = torch.empty((n, out_f), dtype=dtype, device=xq.device)
        ys.append(y)
        views = q6k_views(raw) if split[j] else _views(raw, qt)
        args += [*views, y, out_f, in_features // 256 * (144 if qt == 12 else 210), bias]
        groups = triton.cdiv(in_features, 64 if qt == 12 else 128)
        g = min(i8_launch(qt, n)[0], triton.next_power_of_2(groups))
        consts.update({f"Q{'ABC'[j]}": qt, f"G{'ABC'[j]}": g, f"S{'ABC'[j]}": bool(split[j])})
        nprog += triton.cdiv(out_f, bo)
    nt = i8_launch(12, n)[3]
    _gemv3_i8_kernel[(nprog, triton.cdiv(n, nt))](
        xq, xs, n, in_features, *args, **consts, BO=bo, NT=nt, ASM=asm_ok(xq.device),
        HAS_BIAS=weights[0][3] is not None, num_warps=warps, **launch_opts(xq.device))
    return ys
