"""Checks of the int8-activation Q4_K kernels (gemv_int8.py), shared by the CUDA tests and the
interpreter run (interp_int8.py). Each yields (name, error, tolerance).

Two references: float64 x @ W.T (error: x's int8 rounding, ~0.5 % of the norm) and an exact one that
multiplies the same int8 x: y = xhat @ A.T + x @ B.T with W = A + B split by dequantizing the blocks
with dmin zeroed (A, the scaled nibbles) and with d zeroed (B, the mins), xhat = dx * xq.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, reference, rel_err

from orcd.quant import dequantize
from orcd.quant.kernels.gemv3_int8 import BO3, gemv3_i8
from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
from orcd.quant.kernels.int8_launch import i8_launch
from orcd.quant.kernels.xquant import quantize_x

INT8_TOL = 2e-2  # vs float64 with x unrounded
EXACT_TOL = 2e-5  # vs the same int8 x, fp32 sums in another order


def xhat(xq: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """The x the kernels multiply: int8 bytes of xq times dx per 32, float64 [N, K] on the CPU."""
    q = xq.cpu().view(torch.int8).double()
    return q * xs.cpu().double()[:, :, 0].repeat_interleave(32, dim=1)


def exact_reference(x: torch.Tensor, xq, xs, raw: torch.Tensor, n: int, k: int, qt=T.Q4_K) -> torch.Tensor:
    """W = A + B: Q4_K A = d * sc * nibble (dmin zeroed), B = -dmin * m (d zeroed); Q6_K A = d * sc * v
    and B = d * sc * -32, v = 0..63 (A from blocks whose 6-bit values are v, B: -32 times the scales)."""
    if qt == T.Q4_K:
        blk = raw.cpu().view(n, k // 256, 144)
        a, b = blk.clone(), blk.clone()
        a[:, :, 2:4] = 0
        b[:, :, 0:2] = 0
        return reference(xhat(xq, xs).float(), a.view(n, -1), qt, n, k) + reference(x.float(), b.view(n, -1),
                                                                                       qt, n, k)
    w = dequantize(raw.cpu(), qt, (n, k)).double()  # d * sc * (v - 32)
    blk = raw.cpu().view(n, k // 256, 210).clone()
    blk[:, :, :192] = 0  # every v = 0: d * sc * -32
    off = dequantize(blk.view(n, -1), qt, (n, k)).double()
    return xhat(xq, xs) @ (w - off).T + x.cpu().double() @ off.T


def gemv_cases(dev: str, shapes, ms, dtype=torch.float32, qt=T.Q4_K, launch=None):
    """M rows through gemv_i8 (launch: (G, BO, warps, NT) to force NT tokens per program); bias at M = 3,
    a residual at M = 1 and M >= 5."""
    seed = 100
    for n, k in shapes:
        raw = random_blocks(qt, n, k, seed).to(dev)
        for m in ms:
            seed += 1
            torch.manual_seed(seed)
            x = torch.randn(m, k).to(dev, dtype)
            bias = torch.randn(n).to(dev, dtype) if m == 3 else None
            res = torch.randn(m, n).to(dev, dtype) if m == 1 or m >= 5 else None
            res0 = res.clone() if res is not None else None
            xq, xs = quantize_x(x)
            y = gemv_i8(xq, xs, raw, n, k, qt, bias=bias, residual=res, dtype=dtype, launch=launch)
            extra = (bias.cpu().double() if bias is not None else 0) + (
                res0.cpu().double() if res0 is not None else 0)
            name = f"gemv_{qt.name}_n{n}_k{k}_m{m}_nt{launch[3] if launch else 'auto'}_{str(dtype)[6:]}"
            name += f"_s{launch[4]}" if launch and len(launch) > 4 else ""
            exact_tol = EXACT_TOL if dtype == torch.float32 else 1e-2  # bf16 y: its own rounding
            yield name + "_f64", rel_err(y, reference(x.float(), raw, qt, n, k) + extra), INT8_TOL
            yield name + "_exact", rel_err(y, exact_reference(x, xq, xs, raw, n, k, qt) + extra), exact_tol


def glu_cases(dev: str, shapes, ms, dtype=torch.float32, nt=None):
    """glu_q4k_i8 at its default launch and at BO 32 (output quantized in the epilogue); nt forces NT."""
    seed = 200
    for n, k in shapes:
        g, u = random_blocks(T.Q4_K, n, k, seed).to(dev), random_blocks(T.Q4_K, n, k, seed + 1).to(dev)
        for m in ms:
            seed += 1
            torch.manual_seed(seed)
            x = torch.randn(m, k).to(dev, dtype)
            xq, xs = quantize_x(x)
            ga = exact_reference(x, xq, xs, g, n, k)
            ua = exact_reference(x, xq, xs, u, n, k)
            launches = (None, (8, 32, 4)) if nt is None else ((8, 4, 4, nt), (8, 32, 4, nt))
            for launch in launches:
                y, yq, ys = glu_q4k_i8(xq, xs, g, u, n, k, dtype, launch=launch)
                name = f"glu_n{n}_k{k}_m{m}_{launch[1] if launch else 'default'}_nt{nt or 'auto'}"
                tol = 1e-4 if dtype == torch.float32 else 1e-2
                yield name + "_exact", rel_err(y, torch.nn.functional.silu(ga) * ua), tol
                yq2, ys2 = quantize_x(y)  # == quantize_x of the output
                yield name + "_quant_out", float((yq2 != yq).sum()) + rel_err(ys, ys2.cpu().double()), 1e-6


def quant_cases(dev: str, ks, ms, dtype=torch.float32):
    for k in ks:
        for m in ms:
            torch.manual_seed(k + m)
            x = (torch.randn(m, k) * torch.rand(m, k) * 4).to(dev, dtype)
            w = (torch.rand(k) + 0.5).to(dev, dtype)
            for norm in (None, (w, 1e-6)):
                xq, xs = quantize_x(x, norm)
                xr = x.cpu().double()
                if norm is not None:  # RMSNorm as the kernel rounds it: x * rstd, then * w, in dtype
                    xf = x.float()
                    xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype).float()
                    xr = (xn * w.float()).to(dtype).cpu().double()
                blocks = xr.view(m, k // 32, 32)
                dx = blocks.abs().amax(-1) / 127
                sums = blocks.view(m, k // 32, 2, 16).sum(-1)
                name = f"quant_k{k}_m{m}_{'norm' if norm else 'plain'}"
                yield name + "_dx", rel_err(xs[:, :, 0], dx), 1e-6
                yield name + "_sum", float((xs[:, :, 1:3].cpu().double() - sums).abs().max()), 1e-3
                yield name + "_round", float((xhat(xq, xs) - xr).abs().max() / dx.max()), 0.5 + 1e-3


def gemv3_cases(dev: str, outs, k: int, qts, ms, dtype=torch.float32):
    """gemv3_i8 (q, k, v in one launch) == gemv_i8 of each matrix alone at the same launch shape (rows
    per program BO3: another BO changes the fp32 summation order on the GPU), with biases."""
    for m in ms:
        torch.manual_seed(m)
        x = torch.randn(m, k).to(dev, dtype)
        xq, xs = quantize_x(x)
        ws = [(random_blocks(qt, n, k, 300 + j).to(dev), n, qt, torch.randn(n).to(dev, dtype))
              for j, (n, qt) in enumerate(zip(outs, qts, strict=True))]
        ys = gemv3_i8(xq, xs, ws, k, dtype)
        for j, (raw, n, qt, bias) in enumerate(ws):
            launch = (i8_launch(qt, m)[0], BO3, 4)
            alone = gemv_i8(xq, xs, raw, n, k, qt, bias=bias, dtype=dtype, launch=launch)
            yield f"gemv3_{j}_{qt.name}_m{m}", rel_err(ys[j], alone.cpu().double()), 1e-6
