"""The int8-activation MXFP4 MoE GEMV (orcd/quant/kernels/moe_mxfp4_int8.py) against float64 references:
each case prints `name err tol`.
- `exact-*`: the reference computed from x as the kernel sees it (dx * int8 word bytes, from quantize_x):
  only fp32 summation order differs, relative error < 1e-5 (the 2 * E2M1 table and the E8M0 half scale are
  exact, so a wrong table entry or nibble order shows as an O(1) error).
- `float-*`: the reference from x itself; relative error < 4e-2 (x's int8 rounding: |x - dx q| <= dx / 2).
- `kernel-*`: against the float kernel moe_gemv, same tolerance.
GLU (gate + up, clamped SwiGLU) per pair; down per token with the k slots summed, biases, routed weights
and a residual added in place. Run on CUDA by test_moe_int8.py, and on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from moe_cases import dense, random_mxfp4  # noqa: E402

from orcd.models.moe import clamped_swiglu  # noqa: E402
from orcd.quant.kernels.moe_gemv import moe_gemv  # noqa: E402
from orcd.quant.kernels.moe_mxfp4_int8 import moe_gemv_i8  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402


def x_seen(xq: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """quantize_x's (words [N, K / 4], scales [N, K / 32, 4]) -> the x the int8 dot multiplies, float64."""
    words, scales = (t.cpu() for t in xq)
    q = words.contiguous().view(torch.int8).double()  # little-endian: byte i of word w = element 4w + i
    return (q.view(q.shape[0], -1, 32) * scales[:, :, :1].double()).view(q.shape[0], -1)


def reference(x, ids, w, b, rw, top_k, up=None, bu=None):
    """float64: every expert dequantized (gguf's MXFP4 through dequantize_to), per pair GLU or down * rw."""
    rows = x.double()[torch.arange(ids.numel()) // (top_k if up is not None else 1)]
    out = torch.einsum("pk,pnk->pn", rows, dense(w, x.shape[1]).double()[ids]) + b.double()[ids]
    if up is not None:
        u = torch.einsum("pk,pnk->pn", rows, dense(up, x.shape[1]).double()[ids]) + bu.double()[ids]
        return clamped_swiglu(out, u)
    return out * rw.double()[:, None]


def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double().cpu()
    return ((got.double().cpu() - ref).norm() / ref.norm()).item()


def run_case(device: str, tokens: int, gen: torch.Generator, launch=None, dims=(6, 2, 96, 160)) -> None:
    n_exp, top_k, hidden, ffn = dims  # inputs not multiples of KB blocks, outputs of BN
    wg, wu = random_mxfp4(n_exp, ffn, hidden, gen), random_mxfp4(n_exp, ffn, hidden, gen)
    wd = random_mxfp4(n_exp, hidden, ffn, gen)
    bg, bu, bd = (torch.randn(n_exp, m, generator=gen) * 0.1 for m in (ffn, ffn, hidden))
    x = torch.randn(tokens, hidden, generator=gen) * 0.5
    ids = torch.stack([torch.randperm(n_exp, generator=gen)[:top_k] for _ in range(tokens)]).reshape(-1)
    rw = torch.rand(ids.numel(), generator=gen)
    res = torch.randn(tokens, hidden, generator=gen)
    sg, su, sd = (split_blocks_(w.to(device).clone()) for w in (wg, wu, wd))
    dev_ids, dev_rw = ids.to(device), rw.to(device)
    name = f"T{tokens}{'-' + '.'.join(map(str, launch)) if launch else ''}"

    xq = quantize_x(x.to(device))
    h = moe_gemv_i8(xq, dev_ids, sg, su, bg.to(device), bu.to(device), None, top_k, out_dtype=torch.float32,
                    launch=launch)
    for what, ref_x in (("exact", x_seen(xq)), ("float", x.double())):
        ref = reference(ref_x, ids, wg, bg, None, top_k, wu, bu)
        print(f"{what}-glu-{name} {rel(h, ref):.3e} {1e-5 if what == 'exact' else 4e-2}")
    h_float = moe_gemv(x.to(device), dev_ids, sg, su, bg.to(device), bu.to(device), None, top_k)
    print(f"kernel-glu-{name} {rel(h, h_float):.3e} 4e-2")

    hq = quantize_x(h)
    y = moe_gemv_i8(hq, dev_ids, sd, None, bd.to(device), None, dev_rw, top_k, slots=top_k, launch=launch,
                    residual=res.to(device).clone())
    for what, ref_h in (("exact", x_seen(hq)), ("float", h.double().cpu())):
        ref = res.double() + reference(ref_h, ids, wd, bd, rw, top_k).view(tokens, top_k, -1).sum(1)
        print(f"{what}-down-{name} {rel(y, ref):.3e} {1e-5 if what == 'exact' else 4e-2}")


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    run_case("cpu", 1, gen, dims=(4, 2, 64, 96))
    run_case("cpu", 3, gen, launch=(32, 2, 4), dims=(4, 2, 64, 96))  # KB 2 over 2 and 3 blocks: a masked tail
