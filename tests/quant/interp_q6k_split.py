"""Run under TRITON_INTERPRET=1 (by test_q6k_split.py): each kernel that reads Q6_K in the split layout
(layout.split_q6_k) against the same kernel on GGUF's blocks. Prints `name max_abs_diff 0`: the same
values in the same arithmetic order, so bit-identical (tolerance 0: the check is diff <= 0)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import torch  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks  # noqa: E402

from orcd.quant.kernels.dequant_kernel import dequantize_raw  # noqa: E402
from orcd.quant.kernels.gemv3_int8 import gemv3_i8  # noqa: E402
from orcd.quant.kernels.gemv_int8 import gemv_i8  # noqa: E402
from orcd.quant.kernels.layout import split_q6_k  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.quant.linear import QuantLinear  # noqa: E402


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def gemv_cases():
    """gemv_i8 at M = 1, 3 (bias), 9 (NT 8, a residual), out not a multiple of BO, K = 768."""
    raw = random_blocks(T.Q6_K, 21, 768, 5)
    sp = split_q6_k(raw)
    for m, launch in ((1, None), (3, None), (9, (2, 8, 4, 8))):
        torch.manual_seed(m)
        xq, xs = quantize_x(torch.randn(m, 768))
        bias = torch.randn(21) if m == 3 else None
        res = torch.randn(m, 21) if m == 9 else None
        want = gemv_i8(xq, xs, raw, 21, 768, T.Q6_K, bias, None if res is None else res.clone(),
                       torch.float32, launch)
        got = gemv_i8(xq, xs, sp, 21, 768, T.Q6_K, bias, None if res is None else res.clone(),
                      torch.float32, launch, split=True)
        yield f"gemv_i8_m{m}", diff(got, want)


def gemv3_cases():
    """gemv3_i8 with q/k Q4_K and v Q6_K split, and all three Q6_K with only k split, M = 2."""
    xq, xs = quantize_x(torch.randn(2, 512))
    for types, split in (((T.Q4_K, T.Q4_K, T.Q6_K), (False, False, True)),
                         ((T.Q6_K, T.Q6_K, T.Q6_K), (False, True, False))):
        outs = (40, 8, 8)
        raws = [random_blocks(t, outs[j], 512, 10 + j) for j, t in enumerate(types)]
        gguf = [(r, r.shape[0], t, None) for r, t in zip(raws, types, strict=True)]
        want = gemv3_i8(xq, xs, gguf, 512, torch.float32)
        ws = [(split_q6_k(r) if s else r, *w[1:]) for r, w, s in zip(raws, gguf, split, strict=True)]
        got = gemv3_i8(xq, xs, ws, 512, torch.float32, split=split)
        yield f"gemv3_i8_{''.join('s' if s else 'g' for s in split)}", max(map(diff, got, want))


def dequant_cases():
    """dequantize_raw of a split tensor == of the GGUF one (out not a multiple of 16, K 768)."""
    raw = random_blocks(T.Q6_K, 21, 768, 3)
    want = dequantize_raw(raw, T.Q6_K, 21, 768, torch.float32)
    yield "dequantize_raw", diff(dequantize_raw(split_q6_k(raw), T.Q6_K, 21, 768, torch.float32, split=True),
                                 want)


def linear_cases():
    """A split QuantLinear's forward (q6k_split.split_linear) on 70 float32 rows (dequantize + GEMM)
    against the GGUF QuantLinear's forward (the other row counts: interp_q6k_split_mm.py)."""
    raw = random_blocks(T.Q6_K, 21, 768, 4)
    bias = torch.randn(21)
    x = torch.randn(70, 768)
    gguf = QuantLinear(21, 768, T.Q6_K, torch.float32, raw=raw, bias=bias)
    lin = QuantLinear(21, 768, T.Q6_K, torch.float32, raw=raw.clone(), bias=bias)
    lin.to_split()
    yield "split_linear_f32_m70", diff(lin(x), gguf(x))


if __name__ == "__main__":
    for name, err in (*gemv_cases(), *gemv3_cases(), *dequant_cases(), *linear_cases()):
        print(name, f"{err:.3e}", 0, flush=True)
