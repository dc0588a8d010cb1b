"""Small fused Triton kernels for the decode step of QK-norm blocks (gemma3, qwen3).

- `norm_add`: res += RMSNorm(t) * w (Gemma's post-attention / post-FFN norm and the residual add), and
  optionally h = RMSNorm(res) * w2 (the next norm) in the same launch.
- `qk_norm_rope_kv`: RMSNorm over head_dim of every q and k head, NeoX RoPE, K and V written to the paged
  cache: one launch where the eager layers take ~15.
- `gelu_mul`: gelu_tanh(g) * u for the gate/up products of batches the GLU GEMV does not take.

Rounding follows the eager layers (orcd.models.layers): each normalized value is rounded to the model
dtype before the weight multiply, the product before the residual add; RoPE's cos/sin and its two
products are rounded to the model dtype before their sum. In float32 every rounding is a no-op.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.quant.kernels.fused_linear import launch_opts


@triton.jit
def _rms(x, n, eps):
    """1 / sqrt(mean(x^2) + eps) of a float32 row of n valid elements (padding must be 0)."""
    return 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)


@triton.jit
def _norm_add_kernel(t_ptr, r_ptr, w_ptr, w2_ptr, h_ptr, H, eps, NEXT: tl.constexpr, BH: tl.constexpr,
                     PDL: tl.constexpr = 0):
    if PDL:  # launched early: wait for t, then let the next kernel launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    offs = tl.arange(0, BH)
    m = offs < H
    t = tl.load(t_ptr + row * H + offs, mask=m, other=0.0).to(tl.float32)
    dt = r_ptr.dtype.element_ty
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    y = ((t * _rms(t, H, eps)).to(dt).to(tl.float32) * w).to(dt).to(tl.float32)
    r = (tl.load(r_ptr + row * H + offs, mask=m, other=0.0).to(tl.float32) + y).to(dt)
    tl.store(r_ptr + row * H + offs, r, mask=m)
    if NEXT:
        rf = r.to(tl.float32)
        w2 = tl.load(w2_ptr + offs, mask=m, other=0.0).to(tl.float32)
        h = (rf * _rms(rf, H, eps)).to(dt).to(tl.float32) * w2
        tl.store(h_ptr + row * H + offs, h.to(dt), mask=m)


def norm_add(t: torch.Tensor, res: torch.Tensor, weight: torch.Tensor, eps: float,
             next_weight: torch.Tensor | None = None) -> torch.Tensor | None:
    """res [T, H] += RMSNorm(t [T, H]) * weight, in place. With next_weight: returns
    RMSNorm(res) * next_weight [T, H] (same eps), else None."""
    n, h = res.shape
    out = torch.empty_like(res) if next_weight is not None else None
    _norm_add_kernel[(n,)](t, res, weight, next_weight if out is not None else weight,
                           out if out is not None else res, h, float(eps), NEXT=out is not None,
                           BH=triton.next_power_of_2(h), num_warps=4, **launch_opts(res.device))
    return out


@triton.jit
def _rope_half(x1, x2, c, s, dt: tl.constexpr):
    """NeoX rotation of one head's halves (float32) with eager rounding: round(round(x1 c) - round(x2 s))."""
    o1 = ((x1 * c).to(dt).to(tl.float32) - (x2 * s).to(dt).to(tl.float32)).to(dt)
    o2 = ((x2 * c).to(dt).to(tl.float32) + (x1 * s).to(dt).to(tl.float32)).to(dt)
    return o1, o2


@triton.jit
def _qk_norm_rope_kv_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, eps, pos_ptr, inv_ptr, kc_ptr, vc_ptr,
                            slot_ptr, HQ, HKV, s_slot, D: tl.constexpr, HALF: tl.constexpr,
                            PDL: tl.constexpr = 0):
    # program (t, h): h < HQ: query head h, normed and rotated in place; else KV head h - HQ: K normed,
    # rotated and written to the cache, V copied to it
    if PDL:  # launched early: wait for q, k, v; release the next kernel
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0)
    h = tl.program_id(1)
    dt = q_ptr.dtype.element_ty
    i = tl.arange(0, HALF)
    f = tl.load(pos_ptr + t).to(tl.float32) * tl.load(inv_ptr + i)
    c = tl.cos(f).to(dt).to(tl.float32)
    s = tl.sin(f).to(dt).to(tl.float32)
    kh = h - HQ
    if h < HQ:
        src = q_ptr + (t * HQ + h) * D
        w_ptr = qw_ptr
    else:
        src = k_ptr + (t * HKV + kh) * D
        w_ptr = kw_ptr
    x1 = tl.load(src + i).to(tl.float32)
    x2 = tl.load(src + HALF + i).to(tl.float32)
    rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
    x1 = ((x1 * rstd).to(dt).to(tl.float32) * tl.load(w_ptr + i).to(tl.float32)).to(dt).to(tl.float32)
    x2 = ((x2 * rstd).to(dt).to(tl.float32) * tl.load(w_ptr + HALF + i).to(tl.float32)).to(dt).to(tl.float32)
    o1, o2 = _rope_half(x1, x2, c, s, dt)
    if h < HQ:
        tl.store(src + i, o1)
        tl.store(src + HALF + i, o2)
    else:
        dst = tl.load(slot_ptr + t).to(tl.int64) * s_slot + kh * D
        tl.store(kc_ptr + dst + i, o1.to(kc_ptr.dtype.element_ty))
        tl.store(kc_ptr + dst + HALF + i, o2.to(kc_ptr.dtype.element_ty))
        d = tl.arange(0, D)
        tl.store(vc_ptr + dst + d, tl.load(v_ptr + (t * HKV + kh) * D + d).to(vc_ptr.dtype.element_ty))


def qk_norm_rope_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_norm: tuple[torch.Tensor, float],
                    k_weight: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """q [T, Hq, D] (contiguous) RMSNormed over D with q_norm = (weight [D], eps) and rotated in place
    (NeoX halves, full head_dim, inv_freq [D/2] float32); k [T, Hkv, D] normed with k_weight (same eps) and
    rotated, written with v [T, Hkv, D] to the caches [num_blocks, page, Hkv, D] at slot_mapping [T]."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    _qk_norm_rope_kv_kernel[(t, hq + hkv)](
        q, k.contiguous(), v.contiguous(), q_norm[0], k_weight, float(q_norm[1]), positions, inv_freq,
        k_cache, v_cache, slot_mapping, hq, hkv, k_cache.stride(1), D=d, HALF=d // 2, num_warps=1,
        **launch_opts(q.device))


@triton.jit
def _gelu_mul_kernel(g_ptr, u_ptr, y_ptr, N, BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    g = tl.load(g_ptr + offs, mask=m, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=m, other=0.0).to(tl.float32)
    dt = y_ptr.dtype.element_ty
    # gelu_tanh(g) = g * sigmoid(2z), z = sqrt(2/pi) (g + 0.044715 g^3); rounded as F.gelu's output
    a = (g / (1.0 + tl.exp(-1.5957691216057308 * (g + 0.044715 * g * g * g)))).to(dt).to(tl.float32)
    tl.store(y_ptr + offs, (a * u).to(dt), mask=m)


def gelu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(g) * u for contiguous g, u of one shape and dtype."""
    y = torch.empty_like(g)
    n, block = g.numel(), 1024
    _gelu_mul_kernel[(triton.cdiv(n, block),)](g, u, y, n, BLOCK=block, num_warps=4, **launch_opts(g.device))
    return y
