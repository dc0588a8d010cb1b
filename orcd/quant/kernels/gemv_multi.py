"""Three GEMVs on one input in one launch (attention's q, k, v): saves two launches per layer.

The weights may have different GGML types (Q4_K_M files mix Q5_0 and Q8_0 here); programs
0..na-1 compute the first output, the next nb the second, the rest the third. Optional RMSNorm of x
(prologue) and biases, as in fused_linear.fused_gemv.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import (
    BLOCK_SIZE,
    GEMV_GROUPS,
    TYPE_SIZE,
    _views,
    gemv_config,
    gemv_program,
    launch_opts,
)

# groups per pass by type for this launch (else gemv_config's): enough for all of K in one pass where
# it is short, so every weight load is issued before the wait for x (PDL)
QKV_G: MappingProxyType = MappingProxyType({})  # GGMLQuantizationType -> G; none measured faster


@triton.jit
def _gemv3_kernel(x_ptr, K, stride_xn, nw_ptr, eps,
                  a8, a16, a32, ya, OA, rba, ba, b8, b16, b32, yb, OB, rbb, bb, c8, c16, c32, yc, OC, rbc, bc,
                  QA: tl.constexpr, EA: tl.constexpr, UA: tl.constexpr, GA: tl.constexpr,
                  QB: tl.constexpr, EB: tl.constexpr, UB: tl.constexpr, GB: tl.constexpr,
                  QC: tl.constexpr, EC: tl.constexpr, UC: tl.constexpr, GC: tl.constexpr,
                  BO: tl.constexpr, HAS_BIAS: tl.constexpr, NORM: tl.constexpr, PDL: tl.constexpr = 0):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    na = tl.cdiv(OA, BO)
    nb = tl.cdiv(OB, BO)
    if pid < na:
        gemv_program(pid, n, x_ptr, a8, a16, a32, ya, OA, K, rba, stride_xn, OA, ba, nw_ptr, eps,
                     QA, EA, UA, GA, BO, HAS_BIAS, NORM, False, PDL)
    elif pid < na + nb:
        gemv_program(pid - na, n, x_ptr, b8, b16, b32, yb, OB, K, rbb, stride_xn, OB, bb, nw_ptr, eps,
                     QB, EB, UB, GB, BO, HAS_BIAS, NORM, False, PDL)
    else:
        gemv_program(pid - na - nb, n, x_ptr, c8, c16, c32, yc, OC, K, rbc, stride_xn, OC, bc, nw_ptr, eps,
                     QC, EC, UC, GC, BO, HAS_BIAS, NORM, False, PDL)


def fused_gemv3(x: torch.Tensor, weights: list[tuple[torch.Tensor, int, int, torch.Tensor | None]],
                in_features: int, norm: tuple[torch.Tensor, float] | None = None) -> list[torch.Tensor]:
    """x [N <= 4, in]; weights: 3 x (raw [out_i, row_bytes_i], out_i, qtype_i, bias_i: all or none)
    -> [y_i [N, out_i]] in x.dtype."""
    x = x.contiguous()
    n = x.shape[0]
    has_bias = weights[0][3] is not None
    args, consts, ys, nprog = [], {}, [], 0
    for j, (raw, out_f, qtype, bias) in enumerate(weights):
        qt = int(qtype)
        y = torch.empty((n, out_f), dtype=x.dtype, device=x.device)
        ys.append(y)
        args += [*_views(raw, qt), y, out_f, in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt], bias]
        g = gemv_config(qt, out_f, in_features)[0]
        if qt in QKV_G:
            g = min(QKV_G[qt], triton.next_power_of_2(triton.cdiv(in_features, GEMV_GROUPS[qt][0])))
        epg, u = GEMV_GROUPS[qt]
        consts.update({f"Q{'ABC'[j]}": qt, f"E{'ABC'[j]}": epg, f"U{'ABC'[j]}": u, f"G{'ABC'[j]}": g})
        nprog += triton.cdiv(out_f, 4)
    _gemv3_kernel[(nprog, n)](x, in_features, x.stride(0), norm[0] if norm else None,
                              float(norm[1]) if norm else 0.0, *args, **consts, BO=4, HAS_BIAS=has_bias,
                              NORM=norm is not None, num_warps=2, **launch_opts(x.device))
    return ys
