"""Small fused Triton kernels for the decode step: residual add + RMSNorm, RoPE + KV-cache write, and
SwiGLU's silu(gate) * up over a stacked gate|up product.

Each replaces several eager PyTorch kernels (a decode step is launch-bound: ~3 us per kernel in a
CUDA graph on an H100). Rounding follows the eager layers: the residual sum and the normalized value
are rounded to the model dtype before the weight multiply; cos/sin are rounded to the model dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from orcd import env
from orcd.quant.kernels.fused_linear import launch_opts


@triton.jit
def _add_rmsnorm_kernel(d_ptr, r_ptr, w_ptr, y_ptr, H, eps, HAS_ADD: tl.constexpr, BH: tl.constexpr,
                        PDL: tl.constexpr = 0):
    if PDL:  # launched early: wait for the residual, then let the next kernel (a GEMV) launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0)
    offs = tl.arange(0, BH)
    m = offs < H
    r = tl.load(r_ptr + t * H + offs, mask=m, other=0.0)
    if HAS_ADD:  # residual += delta, rounded to the residual's dtype (as `x = x + f(x)` does)
        r = (r.to(tl.float32) + tl.load(d_ptr + t * H + offs, mask=m, other=0.0).to(tl.float32)).to(r.dtype)
        tl.store(r_ptr + t * H + offs, r, mask=m)
    xf = r.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / H + eps)
    xn = (xf * rstd).to(r.dtype).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + t * H + offs, (xn * w).to(y_ptr.dtype.element_ty), mask=m)


def add_rmsnorm(delta: torch.Tensor | None, residual: torch.Tensor, weight: torch.Tensor,
                eps: float) -> torch.Tensor:
    """residual [T, H] += delta (in place, when given); returns RMSNorm(residual) * weight [T, H]."""
    t, h = residual.shape
    y = torch.empty_like(residual)
    _add_rmsnorm_kernel[(t,)](delta if delta is not None else residual, residual, weight, y, h, float(eps),
                              HAS_ADD=delta is not None, BH=triton.next_power_of_2(h), num_warps=4,
                              **launch_opts(residual.device))
    return y


@triton.jit
def _rope_kv_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, inv_ptr, kc_ptr, vc_ptr, slot_ptr, HQ, HKV, s_slot, s_qt,
                    s_kt, D: tl.constexpr, HALF: tl.constexpr, PDL: tl.constexpr = 0):
    # program (t, h): h < HQ rotates query head h in place; else KV head h - HQ: rotate K, write K and V.
    # s_qt, s_kt: elements from one token's q (k and v) to the next
    if PDL:  # launched early (programmatic dependent launch): wait for q, k, v; release the next kernel
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0)
    h = tl.program_id(1)
    i = tl.arange(0, HALF)
    f = tl.load(pos_ptr + t).to(tl.float32) * tl.load(inv_ptr + i)
    c = tl.cos(f).to(q_ptr.dtype.element_ty).to(tl.float32)
    s = tl.sin(f).to(q_ptr.dtype.element_ty).to(tl.float32)
    if h < HQ:
        base = q_ptr + t * s_qt + h * D
        x1 = tl.load(base + i).to(tl.float32)
        x2 = tl.load(base + HALF + i).to(tl.float32)
        tl.store(base + i, (x1 * c - x2 * s).to(q_ptr.dtype.element_ty))
        tl.store(base + HALF + i, (x2 * c + x1 * s).to(q_ptr.dtype.element_ty))
    else:
        kh = h - HQ
        slot = tl.load(slot_ptr + t).to(tl.int64)
        src = t * s_kt + kh * D
        dst = slot * s_slot + kh * D
        x1 = tl.load(k_ptr + src + i).to(tl.float32)
        x2 = tl.load(k_ptr + src + HALF + i).to(tl.float32)
        tl.store(kc_ptr + dst + i, (x1 * c - x2 * s).to(kc_ptr.dtype.element_ty))
        tl.store(kc_ptr + dst + HALF + i, (x2 * c + x1 * s).to(kc_ptr.dtype.element_ty))
        d = tl.arange(0, D)
        tl.store(vc_ptr + dst + d, tl.load(v_ptr + src + d).to(vc_ptr.dtype.element_ty))


def rope_and_write_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                      inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """q [T, Hq, D] rotated in place (NeoX halves, full head_dim); rotated k and v [T, Hkv, D] written to
    the caches [num_blocks, page, Hkv, D] at slot_mapping [T]. Each token's heads must be contiguous; its
    rows may be apart (column ranges of one q|k|v product), k's and v's the same distance."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    if any(x.stride()[1:] != (d, 1) for x in (q, k, v)) or k.stride(0) != v.stride(0):
        raise ValueError(f"rope_and_write_kv: heads contiguous per token and k, v rows equally apart, got "
                         f"strides {q.stride()}, {k.stride()}, {v.stride()}")
    _rope_kv_kernel[(t, hq + hkv)](q, k, v, positions, inv_freq, k_cache, v_cache, slot_mapping, hq, hkv,
                                   k_cache.stride(1), q.stride(0), k.stride(0), D=d, HALF=d // 2, num_warps=1,
                                   **launch_opts(q.device))


@triton.jit
def _silu_mul_kernel(gu_ptr, y_ptr, N, FW, BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    # element i of y [T, FW]: row t = i // FW, column c = i % FW; gate at gu[t, c], up at gu[t, FW + c]
    if PDL:  # launched early: wait for the gate/up product, then let the down product launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    src = (offs // FW) * (2 * FW) + offs % FW
    g = tl.load(gu_ptr + src, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + src + FW, mask=m, other=0.0).to(tl.float32)
    dt = y_ptr.dtype.element_ty
    a = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)  # rounded as F.silu's output
    tl.store(y_ptr + offs, (a * u).to(dt), mask=m)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """gu [T, 2F] contiguous (gate columns 0..F-1, up columns F..2F-1) -> silu(gate) * up [T, F] in gu's
    dtype, one launch where F.silu(g) * u takes two. Rounded as those eager ops: silu's output to the
    dtype, then the product. On the CPU outside the Triton interpreter: those ops."""
    t, f2 = gu.shape
    f = f2 // 2
    if not gu.is_cuda and not env.triton_interpreter():
        return F.silu(gu[:, :f]) * gu[:, f:]
    gu = gu.contiguous()
    y = torch.empty((t, f), dtype=gu.dtype, device=gu.device)
    n, block = t * f, 1024
    _silu_mul_kernel[(triton.cdiv(n, block),)](gu, y, n, f, BLOCK=block, num_warps=4,
                                               **launch_opts(gu.device))
    return y
