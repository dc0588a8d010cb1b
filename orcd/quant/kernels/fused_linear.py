"""Fused dequantize-and-multiply over raw GGUF blocks: y[N, out] = x[N, in] @ W.T, W kept quantized.

`raw` is uint8 [out, row_bytes] exactly as the GGUF file stores the tensor (each output row's blocks
contiguous). The weights are read once per call and never written back dequantized.
  - N <= GEMV_MAX_N (decode): `_gemv_kernel`, one program per BO output rows and token (and K split,
    SPLIT_LAUNCH), fp32 multiply-reduce on the CUDA cores (+ bias / residual, RMSNorm of x on the fly);
    `_gemv_glu_kernel` fuses SwiGLU's gate, up and product. On Hopper they are launched with
    programmatic dependent launch (PDL_MODE): weight loads start before the previous kernel ends.
  - GEMV_MAX_N < N <= MM_MAX_N (batched decode): Q4_K with 16-bit x in mmq_cuda.py (CUDA C, where NVRTC
    and compute capability >= 8.0 allow) or mmq.py, Q5_0 / Q8_0 with 16-bit x in mmq_legacy.py, else where
    batched_linear.routed(): raw tiles dequantized in registers into tensor-core products, each weight
    read once for all rows; with the norm / residual / SwiGLU fusions batched_fused.py (same tiles).
  - larger N (prefill) and the other types: Triton dequantize to x.dtype, then one cuBLAS GEMM.
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Final

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from orcd import env
from orcd.quant.kernels.batched_fused import batched_fused
from orcd.quant.kernels.batched_linear import batched_linear, routed
from orcd.quant.kernels.dequant_kernel import dequantize_raw
from orcd.quant.kernels.gemv_tiles import gemv_tile
from orcd.quant.kernels.layout import BLOCK_SIZE, TYPE_SIZE, q6k_tail
from orcd.quant.kernels.mmq import mmq_linear, mmq_routed
from orcd.quant.kernels.mmq_cuda import mmq_cuda_linear, mmq_cuda_routed
from orcd.quant.kernels.mmq_legacy import mmq_legacy_linear, mmq_legacy_routed
from orcd.quant.kernels.split_k import split_counters, split_sum

# Tables are read-only and keyed by GGMLQuantizationType (an IntEnum: t[12] finds t[Q.Q4_K] too).
# GEMV: type -> (inputs per group EPG, load units per group U); see gemv_tiles.py
GEMV_GROUPS = MappingProxyType({Q.Q8_0: (32, 16), Q.Q5_0: (32, 8), Q.Q4_K: (64, 8), Q.Q6_K: (128, 32)})
GEMV_MAX_N: Final = 4  # above: batched_linear (routed shapes, N <= MM_MAX_N), else dequantize + cuBLAS
MM_MAX_N: Final = 64


@triton.jit
def _gemv_kernel(x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn,
                 QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                 b_ptr=None, HAS_BIAS: tl.constexpr = False, nw_ptr=None, eps=0.0,
                 NORM: tl.constexpr = False, RES: tl.constexpr = False, PDL: tl.constexpr = 0,
                 ws_ptr=None, cnt_ptr=None, S: tl.constexpr = 1, Q6S: tl.constexpr = False):
    gemv_program(tl.program_id(0), tl.program_id(1), x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn,
                 stride_yn, b_ptr, nw_ptr, eps, QT, EPG, U, G, BO, HAS_BIAS, NORM, RES, PDL,
                 ws_ptr, cnt_ptr, S, Q6S)


@triton.jit
def gemv_program(pid_o, n, x_ptr, p8, p16, p32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn, b_ptr, nw_ptr,
                 eps, QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr,
                 BO: tl.constexpr, HAS_BIAS: tl.constexpr, NORM: tl.constexpr, RES: tl.constexpr,
                 PDL: tl.constexpr = 0, ws_ptr=None, cnt_ptr=None, S: tl.constexpr = 1,
                 Q6S: tl.constexpr = False):
    # one program: BO rows x all of K (or split s's share of it) for token n; products accumulate
    # elementwise, reduced once; Q6S: Q6_K in layout.split_q6_k's layout (_views(split=True))
    if PDL == 2:
        tl.extra.cuda.gdc_launch_dependents()
    s = 0
    if S > 1:
        s = tl.program_id(2)
    rows = pid_o * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row16 = rows.to(tl.int64)[:, None, None] * (row_bytes // 2)
    gg = tl.arange(0, G)[None, :, None]
    xr = x_ptr + n * stride_xn
    k_lo = 0
    k_hi = K
    if S > 1:  # split s covers whole passes [k_lo, k_hi)
        k_step = tl.cdiv(tl.cdiv(K, G * EPG), S) * (G * EPG)
        k_lo = s * k_step
        k_hi = tl.minimum(K, k_lo + k_step)
    km = (k_lo + gg * EPG) < k_hi  # whole groups: K is a multiple of the block size
    acc, _b, rstd = gemv_tile(p8, p16, p32, row16, rmask & km, km, xr, k_lo, QT, G, nw_ptr, 1.0, K, eps,
                              NORM, True, PDL, Q6S=Q6S)
    for k0 in range(k_lo + G * EPG, k_hi, G * EPG):
        km = (k0 + gg * EPG) < k_hi
        a, _b2, _r = gemv_tile(p8, p16, p32, row16, rmask & km, km, xr, k0, QT, G, nw_ptr, rstd, K, eps,
                               NORM, False, PDL, Q6S=Q6S)
        acc += a
    if PDL == 4:
        tl.extra.cuda.gdc_launch_dependents()
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    if S > 1:
        total, last = split_reduce(out, rows, pid_o, n, s, OUT, ws_ptr, cnt_ptr, S)
        if last:  # the program that summed the partials
            gemv_epilogue(total, rows, n, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS, RES)
    else:
        gemv_epilogue(out, rows, n, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS, RES)


@triton.jit
def gemv_epilogue(out, rows, n, y_ptr, OUT, stride_yn, b_ptr, HAS_BIAS: tl.constexpr, RES: tl.constexpr):
    if HAS_BIAS:
        out += tl.load(b_ptr + rows, mask=rows < OUT, other=0.0).to(tl.float32)
    if RES:  # y is the residual stream: y[rows] += x @ W.T (in place)
        out += tl.load(y_ptr + n * stride_yn + rows, mask=rows < OUT, other=0.0).to(tl.float32)
    tl.store(y_ptr + n * stride_yn + rows, out.to(y_ptr.dtype.element_ty), mask=rows < OUT)


@triton.jit
def split_reduce(out, rows, pid_o, n, s, OUT, ws_ptr, cnt_ptr, S: tl.constexpr):
    """Split-K: each split stores its partial [BO] to ws[n, s, rows]; the last of the S programs of a
    row block to arrive sums the S partials in split order (split_k.split_sum). Returns (the sum,
    whether this program is that last one)."""
    cnt = cnt_ptr + n * tl.num_programs(0) + pid_o
    return split_sum(out, ws_ptr + (n * S) * OUT + rows, OUT, rows < OUT, cnt, s, S)


@triton.jit
def _gemv_glu_kernel(x_ptr, g8, g16, g32, u8, u16, u32, y_ptr, OUT, K, row_bytes, stride_xn, stride_yn,
                     QT: tl.constexpr, EPG: tl.constexpr, U: tl.constexpr, G: tl.constexpr, BO: tl.constexpr,
                     nw_ptr=None, eps=0.0, NORM: tl.constexpr = False, PDL: tl.constexpr = 0,
                     GELU: tl.constexpr = False, Q6S: tl.constexpr = False):
    # y = silu(x @ Wg.T) * (x @ Wu.T) (GELU: gelu_tanh, Gemma): gate and up read side by side, each x
    # load shared by both; Q6S: both Q6_K in layout.split_q6_k's layout
    if PDL == 2:
        tl.extra.cuda.gdc_launch_dependents()
    n = tl.program_id(1)
    rows = tl.program_id(0) * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row16 = rows.to(tl.int64)[:, None, None] * (row_bytes // 2)
    gg = tl.arange(0, G)[None, :, None]
    xr = x_ptr + n * stride_xn
    km = gg * EPG < K
    acc_g, acc_u, rstd = gemv_tile(g8, g16, g32, row16, rmask & km, km, xr, 0, QT, G, nw_ptr, 1.0, K, eps,
                                   NORM, True, PDL, u8, u16, u32, True, Q6S)
    for k0 in range(G * EPG, K, G * EPG):
        km = (k0 + gg * EPG) < K
        a, b, _r = gemv_tile(g8, g16, g32, row16, rmask & km, km, xr, k0, QT, G, nw_ptr, rstd, K, eps,
                             NORM, False, PDL, u8, u16, u32, True, Q6S)
        acc_g += a
        acc_u += b
    if PDL == 4:
        tl.extra.cuda.gdc_launch_dependents()
    a = tl.sum(tl.sum(acc_g, axis=2), axis=1)
    b = tl.sum(tl.sum(acc_u, axis=2), axis=1)
    if GELU:  # 0.5 a (1 + tanh(z)) = a * sigmoid(2z), z = sqrt(2/pi) (a + 0.044715 a^3)
        out = a / (1.0 + tl.exp(-1.5957691216057308 * (a + 0.044715 * a * a * a))) * b
    else:
        out = a / (1.0 + tl.exp(-a)) * b
    tl.store(y_ptr + n * stride_yn + rows, out.to(y_ptr.dtype.element_ty), mask=rows < OUT)


# GEMV launch shapes per type: (max groups per pass, rows per program, warps). Picked from a sweep on
# an H100 (bench/kernels/kernel_times.py; results in docs/performance.md): small tiles of 4 rows beat whole-K
# passes because more programs are in flight; x is loaded once per program and reused by its 4 rows.
GEMV_LAUNCH = MappingProxyType({Q.Q8_0: (8, 4, 1), Q.Q5_0: (16, 4, 2), Q.Q4_K: (32, 4, 4),
                                Q.Q6_K: (16, 4, 4)})
GLU_LAUNCH = GEMV_LAUNCH  # the SwiGLU kernel (two matrices per program)
# Matrices of at least LARGE_WEIGHTS weights (7B's ffn_down 3584 x 18944 and LM head 152064 x 3584): H100
# sweep in docs/performance.md ("7B products"): Q6_K with G 4, BO 8, 4 warps: LM head 840 -> 502 us,
# ffn_down 125 -> 91 us (Q4_K's small-matrix shape stayed the best for its large ones).
LARGE_WEIGHTS: Final = 1 << 26
GEMV_LAUNCH_LARGE = MappingProxyType({Q.Q6_K: (4, 8, 4)})


# Split-K launch per type, (G, BO, warps, target programs): a GEMV whose rows make fewer than half the
# target programs (ffn_down 896 x 4864: 224) runs with its K split until about target programs run, each
# split a whole number of passes; partials are summed in split order (deterministic). Picked on an H100
# from whole-decode-step runs with PDL (docs/performance.md): Q4_K 3 splits of one pass, Q6_K 5 splits
# of two.
SPLIT_LAUNCH = MappingProxyType({Q.Q4_K: (32, 4, 2, 896), Q.Q6_K: (4, 4, 2, 1120)})
MAX_SPLIT: Final = 8


def gemv_config(qt: int, out_features: int, in_features: int, glu: bool = False) -> tuple[int, int, int]:
    """(G groups per pass, BO rows per program, num_warps) for the GEMV (glu: SwiGLU) kernel."""
    g_max, bo, warps = (GLU_LAUNCH if glu else GEMV_LAUNCH)[qt]
    if out_features * in_features >= LARGE_WEIGHTS and qt in GEMV_LAUNCH_LARGE:
        g_max, bo, warps = GEMV_LAUNCH_LARGE[qt]
    g = min(g_max, triton.next_power_of_2(triton.cdiv(in_features, GEMV_GROUPS[qt][0])))
    return g, bo, warps


def gemv_plan(qt: int, out_features: int, in_features: int) -> tuple[int, int, int, int]:
    """(G, BO, num_warps, K splits) for fused_gemv: SPLIT_LAUNCH's where it applies, else no split."""
    if qt in SPLIT_LAUNCH:
        g_max, bo, warps, target = SPLIT_LAUNCH[qt]
        g = min(g_max, triton.next_power_of_2(triton.cdiv(in_features, GEMV_GROUPS[qt][0])))
        nprog = triton.cdiv(out_features, bo)
        passes = triton.cdiv(in_features, g * GEMV_GROUPS[qt][0])
        if 2 * nprog <= target and passes >= 2:
            return g, bo, warps, min(MAX_SPLIT, passes, target // nprog)
    return (*gemv_config(qt, out_features, in_features), 1)


# PDL: kernels wait (griddepcontrol.wait) before reading anything the previous kernel wrote, and let the
# next kernel launch (launch_dependents): 1 never (at exit), 2 at their start, 3 right after the wait,
# 4 after their main loop (before the reduction and epilogue). Measured in docs/performance.md; 3 kept.
PDL_MODE: Final = 3


@functools.lru_cache(maxsize=8)
def pdl_enabled(device: torch.device) -> bool:
    """Programmatic dependent launch: each GEMV may start (and read its first weights) while the kernel
    before it finishes; it waits (griddepcontrol.wait) before reading x. Hopper or newer, compiled kernels
    only (not under Triton's own interpreter switch, TRITON_INTERPRET=1)."""
    if device.type != "cuda" or env.triton_interpreter():
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def launch_opts(device: torch.device) -> dict:
    """Launch keywords for the GEMV-style kernels: PDL (constexpr) and, when on, launch_pdl."""
    return {"PDL": PDL_MODE, "launch_pdl": True} if pdl_enabled(device) else {}


def _views(raw: torch.Tensor, qt: int, split: bool = False) -> tuple[torch.Tensor, ...]:
    p16 = raw.view(-1).view(torch.int16)
    if split and qt != Q.Q6_K:
        raise ValueError(f"the split layout is Q6_K's (14), not type {qt}")
    if split:  # Q6_K in layout.split_q6_k's layout: p32's place holds the d's
        return raw, p16, q6k_tail(raw).view(torch.int16)
    return raw, p16, raw.view(-1).view(torch.int32) if qt == Q.Q4_K else p16  # Q4_K rows: 4-byte aligned


def fused_glu(x: torch.Tensor, raw_gate: torch.Tensor, raw_up: torch.Tensor, out_features: int,
              in_features: int, qtype: int, norm: tuple[torch.Tensor, float] | None = None,
              launch: tuple[int, int, int] | None = None, gelu: bool = False,
              split: bool = False) -> torch.Tensor:
    """silu(x' @ Wg.T) * (x' @ Wu.T) for x [N <= MM_MAX_N, in]; both weights raw, same type and shape.
    x' = x, or RMSNorm(x) * weight for norm = (weight [in], eps). launch: (G, BO, warps) override of the
    GEMV (N <= GEMV_MAX_N; above: batched_fused.py, one pass over both weights for all rows).
    gelu: GELU (tanh approximation) in place of SiLU (Gemma's gated FFN). split: both Q6_K in
    layout.split_q6_k's layout (the same values as on GGUF's blocks)."""
    qt = int(qtype)
    x = x.contiguous()
    n = x.shape[0]
    if n > GEMV_MAX_N:
        return batched_fused(x, raw_gate, out_features, in_features, qt, norm, raw_up=raw_up, gelu=gelu,
                             split=split)
    y = torch.empty((n, out_features), dtype=x.dtype, device=x.device)
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    g, bo, warps = launch or gemv_config(qt, out_features, in_features, glu=True)
    epg, u = GEMV_GROUPS[qt]
    _gemv_glu_kernel[(triton.cdiv(out_features, bo), n)](
        x, *_views(raw_gate, qt, split), *_views(raw_up, qt, split), y, out_features, in_features, row_bytes,
        x.stride(0), y.stride(0), QT=qt, EPG=epg, U=u, G=g, BO=bo, nw_ptr=norm[0] if norm else None,
        eps=float(norm[1]) if norm else 0.0, NORM=norm is not None, GELU=gelu, Q6S=split, num_warps=warps,
        **launch_opts(x.device))
    return y


def fused_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 qtype: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] (bf16/fp16/fp32), raw uint8 [out, row_bytes] -> [N, out] in x.dtype (+ bias [out])."""
    return fused_gemv(x, raw, out_features, in_features, qtype, bias)


def fused_gemv(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int, qtype: int,
               bias: torch.Tensor | None = None, norm: tuple[torch.Tensor, float] | None = None,
               residual: torch.Tensor | None = None) -> torch.Tensor:
    """fused_linear with decode-step fusions (N <= MM_MAX_N; above GEMV_MAX_N rows batched_fused.py):
    norm = (weight [in], eps): multiply RMSNorm(x) * weight instead of x;
    residual [N, out]: add the product into it in place and return it."""
    qt = int(qtype)
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"x must be [N, {in_features}], got {tuple(x.shape)}")
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    if raw.dtype != torch.uint8 or raw.numel() != out_features * row_bytes:
        raise ValueError(f"raw must be uint8 [{out_features}, {row_bytes}]")
    x = x.contiguous()
    raw = raw.contiguous()
    n = x.shape[0]
    y = residual if residual is not None else torch.empty((n, out_features), dtype=x.dtype, device=x.device)
    if n == 0:
        return y
    fuse = norm is not None or residual is not None
    if fuse and n > MM_MAX_N:
        raise ValueError(f"norm/residual fusion is for decode batches (N <= {MM_MAX_N})")
    if fuse and n > GEMV_MAX_N:  # one pass over the weights for all rows, the fusions inside
        return batched_fused(x, raw, out_features, in_features, qt, norm, residual, bias=bias)
    if n <= GEMV_MAX_N:
        g, bo, warps, splits = gemv_plan(qt, out_features, in_features)
        launch_gemv(x, raw, y, qt, out_features, in_features, g, bo, warps, splits, bias, norm,
                    residual is not None)
        return y
    if n <= MM_MAX_N and mmq_cuda_routed(qt, in_features, x, raw):  # 5..16 rows: CUDA C, tensor cores
        return mmq_cuda_linear(x, raw, out_features, in_features, bias)
    if n <= MM_MAX_N and mmq_legacy_routed(qt, x, raw, out_features, in_features):  # Q5_0 / Q8_0: CUDA C
        return mmq_legacy_linear(x, raw, out_features, in_features, qt, bias)
    if n <= MM_MAX_N and mmq_routed(qt, in_features, x.dtype):  # decode batches: raw tiles, tensor cores
        return mmq_linear(x, raw, out_features, in_features, qt, bias, float_w=True)
    if n <= MM_MAX_N and routed(qt, out_features, in_features):
        return batched_linear(x, raw, out_features, in_features, qt, bias)
    # more tokens: dequantize to x.dtype (Triton), then one cuBLAS GEMM
    w = dequantize_raw(raw, qt, out_features, in_features, x.dtype)
    return torch.addmm(bias, x, w.t()) if bias is not None else torch.matmul(x, w.t())


def launch_gemv(x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor, qt: int, out_features: int,
                in_features: int, g: int, bo: int, warps: int, splits: int = 1,
                bias: torch.Tensor | None = None, norm: tuple[torch.Tensor, float] | None = None,
                res: bool = False, split: bool = False) -> None:
    """_gemv_kernel for x [N, in] -> y [N, out] with an explicit launch shape (also used by the bench).
    split: Q6_K in layout.split_q6_k's layout (the same values as on GGUF's blocks)."""
    n = x.shape[0]
    nprog = triton.cdiv(out_features, bo)
    cnt = split_counters(x.device, nprog * n) if splits > 1 else None
    splits = splits if cnt is not None else 1
    ws = torch.empty((n, splits, out_features), dtype=torch.float32, device=x.device) if splits > 1 else None
    epg, u = GEMV_GROUPS[qt]
    row_bytes = in_features // BLOCK_SIZE[qt] * TYPE_SIZE[qt]
    _gemv_kernel[(nprog, n, splits)](
        x, *_views(raw, qt, split), y, out_features, in_features, row_bytes, x.stride(0), y.stride(0), QT=qt,
        EPG=epg, U=u, G=g, BO=bo, b_ptr=bias, HAS_BIAS=bias is not None, nw_ptr=norm[0] if norm else None,
        eps=float(norm[1]) if norm else 0.0, NORM=norm is not None, RES=res, ws_ptr=ws, cnt_ptr=cnt,
        S=splits, Q6S=split, num_warps=warps, **launch_opts(x.device))
