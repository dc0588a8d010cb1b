"""The int8-activation Q8_0 GEMVs (orcd/quant/kernels/q8_int8_gemv.py) against float64 references: each case
prints `name err tol`. `exact-*`: the reference from the x the kernel sees (dx * int8 bytes of quantize_x,
here with the RMSNorm fused) and gguf's Q8_0 dequantize: only fp32 summation order differs (< 1e-5).
`float-*`: from RMSNorm(x) * w itself (< 2e-2: x's int8 rounding). q, k, v in one launch with biases;
o alone added into a residual. Run on CUDA by test_q8_int8.py, and under TRITON_INTERPRET=1 on the CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from moe_int8_cases import rel, x_seen  # noqa: E402

from orcd.quant.kernels.q8_int8_gemv import q8_gemv_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402


def q8(out_f: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw Q8_0 uint8 [out, k / 32 * 34], its gguf dequantize float64 [out, k])."""
    w = (torch.randn(out_f, k, generator=gen) * 0.05).numpy().astype(np.float32)
    raw = quantize(w, Q.Q8_0)
    return torch.from_numpy(raw.copy()), torch.from_numpy(dequantize(raw, Q.Q8_0)).double()


def run_case(device: str, tokens: int, outs=(40, 8, 8), k: int = 160, launch=None) -> None:
    gen = torch.Generator().manual_seed(tokens)
    ws = [q8(o, k, gen) for o in outs]
    biases = [torch.randn(o, generator=gen) * 0.1 for o in outs]
    x = torch.randn(tokens, k, generator=gen)
    nw, eps = torch.rand(k, generator=gen) + 0.5, 1e-5
    xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * nw  # fp32, as the kernel rounds it
    xq = quantize_x(x.to(device), norm=(nw.to(device), eps))
    dev_ws = [(w.to(device), o, b.to(device)) for (w, _), o, b in zip(ws, outs, biases, strict=True)]
    ys = q8_gemv_i8(*xq, dev_ws, k, torch.float32, launch=launch)
    name = f"T{tokens}{'-' + '.'.join(map(str, launch)) if launch else ''}"
    for what, xr in (("exact", x_seen(xq)), ("float", xn.double())):
        err = max(rel(y, xr @ wd.T + b.double()) for y, (_, wd), b in zip(ys, ws, biases, strict=True))
        print(f"{what}-qkv-{name} {err:.3e} {1e-5 if what == 'exact' else 2e-2}")
    res = torch.randn(tokens, outs[1], generator=gen)
    oq = quantize_x(x.to(device))
    (got,) = q8_gemv_i8(*oq, [(ws[1][0].to(device), outs[1], None)], k, torch.float32,
                        residual=res.to(device).clone(), launch=launch)
    print(f"exact-o-res-{name} {rel(got, res.double() + x_seen(oq) @ ws[1][1].T):.3e} 1e-5")


if __name__ == "__main__":
    run_case("cpu", 1)
    run_case("cpu", 3, launch=(16, 2, 4))  # 5 blocks in steps of 2: a masked tail; 40 rows over BO 16
