"""The int8-activation Q8_0 / Q5_0 GEMVs (orcd/quant/kernels/gemv_legacy_int8.py) against float64 references:
each case prints `name err tol`. `exact-*`: the reference from the x the kernel sees (dx * int8 bytes of
quantize_x) and gguf's dequantize: only fp32 summation order differs (< 1e-5). `float-*`: from x itself
(< 2e-2: x's int8 rounding). With a bias, and added into a residual. Run on CUDA by test_legacy_int8.py,
and under TRITON_INTERPRET=1 on the CPU."""

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

from orcd.quant.kernels.gemv_legacy_int8 import gemv_legacy_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402


def weights(qt: Q, out_f: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw uint8 [out, k / 32 * block bytes], its gguf dequantize float64 [out, k])."""
    w = (torch.randn(out_f, k, generator=gen) * 0.05).numpy().astype(np.float32)
    raw = quantize(w, qt)
    return torch.from_numpy(raw.copy()), torch.from_numpy(dequantize(raw, qt)).double()


def run_case(device: str, qt: Q, tokens: int, out_f: int = 40, k: int = 160, launch=None) -> None:
    gen = torch.Generator().manual_seed(tokens * 100 + int(qt))
    raw, wd = weights(qt, out_f, k, gen)
    bias = torch.randn(out_f, generator=gen) * 0.1
    x = torch.randn(tokens, k, generator=gen)
    xq = quantize_x(x.to(device))
    name = f"{qt.name}-T{tokens}-{out_f}x{k}{'-' + '.'.join(map(str, launch)) if launch else ''}"
    y = gemv_legacy_i8(*xq, raw.to(device), out_f, k, qt, bias=bias.to(device), dtype=torch.float32,
                       launch=launch)
    for what, xr in (("exact", x_seen(xq)), ("float", x.double())):
        tol = 1e-5 if what == "exact" else 2e-2
        print(f"{what}-bias-{name} {rel(y, xr @ wd.T + bias.double()):.3e} {tol}")
    res = torch.randn(tokens, out_f, generator=gen)
    got = gemv_legacy_i8(*xq, raw.to(device), out_f, k, qt, residual=res.to(device).clone(),
                         dtype=torch.float32, launch=launch)
    print(f"exact-res-{name} {rel(got, res.double() + x_seen(xq) @ wd.T):.3e} 1e-5")


def run_rows(device: str, rows: int, out_f: int = 40, k: int = 160) -> None:
    """DecodeProducts.down_rows (the unfused step's down) on a Q5_0 weight: gemv_legacy_i8 up to
    LEGACY_ROWS_MAX rows (`float-rows-*`, x's int8 rounding), the same values as linear() above it."""
    from types import SimpleNamespace

    from orcd.runner.decode_products import LEGACY_ROWS_MAX, DecodeProducts, linear

    gen = torch.Generator().manual_seed(rows)
    raw, wd = weights(Q.Q5_0, out_f, k, gen)
    dn = SimpleNamespace(qtype=Q.Q5_0, raw=raw.to(device), out_features=out_f, in_features=k, bias=None)
    a = torch.randn(rows, k, generator=gen).to(device)
    y = DecodeProducts(int8_x=True, int8_attn=True).down_rows(SimpleNamespace(down=dn), a)
    print(f"float-rows-{rows} {rel(y, a.double().cpu() @ wd.T):.3e} 2e-2")
    if rows > LEGACY_ROWS_MAX:
        print(f"same-as-linear-rows-{rows} {int(not torch.equal(y, linear(dn, a)))} 1")


if __name__ == "__main__":
    run_rows("cpu", 6)
    for qt in (Q.Q8_0, Q.Q5_0):
        run_case("cpu", qt, 1)
        run_case("cpu", qt, 3, launch=(2, 16, 4))  # 5 blocks in steps of 2: a masked tail; 40 rows over BO 16
