"""The expert-grouped int8 MoE GEMV (orcd/quant/kernels/moe_grouped_i8.py) and norm_route(quant=True) against
float64 references and the per-pair kernel (moe_mxfp4_int8.py): each case prints `name err tol`.
- `glu-*`: the quantized SwiGLU rows (dequantized) against float64 from the int8 x the kernel sees; the
  output's own int8 rounding (<= dx / 2 per 32 values) bounds it: tol 1e-2.
- `glu-old-*`: the same rows against quantize_x of the per-pair kernel's output: equal but for a value on
  a rounding edge flipping one step (fp32 order): tol 1e-4.
- `down-*`: each pair's routed-weighted row against float64 from the activations it reads: tol 1e-5;
  `sum-*`: the residual after moe_sum against residual + the k slots' float64 sum.
- `mlp-old-*`: moe_mlp_i8_grouped against moe_mlp_i8's launches from the same h: tol 1e-3.
- `unrouted-*`: an expert no pair routes to rewritten: output bitwise equal (tol 1e-30); `routed-*`: the
  expert of pair 0 rewritten: the output changes (1 / change < 1).
- `crowd-*`: 7 of 8 pairs on one expert (groups longer than TM: the leads split them), glu and down.
- `norm-route-quant`: norm_route(quant=True)'s words and dx against quantize_x(h): exact (tol 1e-30; the
  per-16 sums, which the MXFP4 GEMVs do not read, within fp32 summation order). `norm-route-bk512`: the
  router walked in one 512-wide step: the same h and experts, the weights within fp32 order.
Run on CUDA by test_moe_grouped_i8.py, and on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from moe_cases import random_mxfp4  # noqa: E402
from moe_int8_cases import reference, rel, x_seen  # noqa: E402

from orcd.quant.kernels.moe_grouped_i8 import (  # noqa: E402
    down_i8_grouped,
    glu_i8_grouped,
    moe_mlp_i8_grouped,
    moe_sum,
)
from orcd.quant.kernels.moe_mxfp4_int8 import moe_gemv_i8  # noqa: E402
from orcd.quant.kernels.moe_router import norm_route  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402


def weights(dims, gen):
    n_exp, _, hidden, ffn = dims
    raw = (random_mxfp4(n_exp, ffn, hidden, gen), random_mxfp4(n_exp, ffn, hidden, gen),
           random_mxfp4(n_exp, hidden, ffn, gen))
    biases = tuple(torch.randn(n_exp, m, generator=gen) * 0.1 for m in (ffn, ffn, hidden))
    return raw, biases


OLD_LAUNCH = (32, 8, 4)  # the per-pair kernel's tiles here: fewer programs under the interpreter


def kernels_case(device, name, ids, gen, dims, launches=None, old=True) -> None:
    """glu, down and sum of the grouped kernels for the pairs ids [P] (P = T * top_k); old: glu-old too."""
    n_exp, top_k, hidden, ffn = dims
    tokens = ids.numel() // top_k
    (wg, wu, wd), (bg, bu, bd) = weights(dims, gen)
    x = torch.randn(tokens, hidden, generator=gen) * 0.5
    rw = torch.rand(ids.numel(), generator=gen)
    res = torch.randn(tokens, hidden, generator=gen)
    sg, su, sd = (split_blocks_(w.to(device).clone()) for w in (wg, wu, wd))
    d_ids, d_rw = ids.to(device), rw.to(device)
    lg, ld = launches or (None, None)
    xq = quantize_x(x.to(device))
    aq = glu_i8_grouped(xq, d_ids, sg, su, bg.to(device), bu.to(device), top_k, torch.float32, launch=lg)
    ref = reference(x_seen(xq), ids, wg, bg, None, top_k, wu, bu)
    print(f"glu-{name} {rel(x_seen(aq), ref):.3e} 1e-2")
    if old:
        h = moe_gemv_i8(xq, d_ids, sg, su, bg.to(device), bu.to(device), None, top_k, out_dtype=torch.float32,
                        launch=OLD_LAUNCH)
        print(f"glu-old-{name} {rel(x_seen(aq), x_seen(quantize_x(h))):.3e} 1e-4")
    y = down_i8_grouped(aq, d_ids, sd, bd.to(device), d_rw, top_k, launch=ld)
    ref_y = reference(x_seen(aq), ids, wd, bd, rw, top_k)
    print(f"down-{name} {rel(y, ref_y):.3e} 1e-5")
    got = moe_sum(y, top_k, res.to(device).clone())
    print(f"sum-{name} {rel(got, res.double() + ref_y.view(tokens, top_k, -1).sum(1)):.3e} 1e-6")


def mlp_case(device, gen, dims=(6, 2, 64, 96), tokens=4) -> None:
    """The whole grouped MLP against moe_mlp_i8, and its routing invariance."""
    n_exp, top_k, hidden, ffn = dims
    (wg, wu, wd), biases = weights(dims, gen)
    ids = torch.stack([torch.randperm(n_exp - 1, generator=gen)[:top_k] for _ in range(tokens)]).reshape(-1)
    ids[0:top_k * 2:top_k] = 1  # tokens 0 and 1 share expert 1; expert n_exp - 1 is never routed
    h = torch.randn(tokens, hidden, generator=gen) * 0.5
    rw = torch.rand(ids.numel(), generator=gen).to(device)
    res = torch.randn(tokens, hidden, generator=gen).to(device)
    b = tuple(t.to(device) for t in biases)
    d_ids = ids.to(device)

    def run(raw):
        s = [split_blocks_(w.to(device).clone()) for w in raw]
        return moe_mlp_i8_grouped(quantize_x(h.to(device)), d_ids, *s, b, rw, top_k, res.clone())

    base = run((wg, wu, wd))
    sg, su, sd = (split_blocks_(w.to(device).clone()) for w in (wg, wu, wd))  # moe_mlp_i8's 4 launches:
    act = moe_gemv_i8(quantize_x(h.to(device)), d_ids, sg, su, b[0], b[1], None, top_k, out_dtype=res.dtype,
                      launch=OLD_LAUNCH)
    old = moe_gemv_i8(quantize_x(act), d_ids, sd, None, b[2], None, rw, top_k, slots=top_k, launch=OLD_LAUNCH,
                      residual=res.clone())
    print(f"mlp-old-T{tokens} {rel(base, old):.3e} 1e-3")
    for tag, e in (("unrouted", n_exp - 1), ("routed", int(ids[0]))):
        raws = [w.clone() for w in (wg, wu, wd)]
        for w in raws:
            w[e] = random_mxfp4(1, w.shape[1], w.shape[2] // 17 * 32, gen)[0]
        diff = (run(raws) - base).abs().max().item()
        if tag == "unrouted":
            print(f"unrouted-T{tokens} {diff:.3e} 1e-30")
        else:
            print(f"routed-T{tokens} {1.0 / max(diff, 1e-30):.3e} 1e30")


def norm_route_quant_case(device, gen, tokens=3, hidden=96, n_exp=8, top_k=2) -> None:
    r = torch.randn(tokens, hidden, generator=gen).to(device)
    nw, w, b = (torch.randn(*s, generator=gen).to(device) for s in ((hidden,), (n_exp, hidden), (n_exp,)))
    h, ids, rw = norm_route(r, nw, 1e-5, w, b, top_k)
    (hq, hs), ids_q, rw_q = norm_route(r, nw, 1e-5, w, b, top_k, quant=True)
    wq, ws = quantize_x(h)
    same = torch.equal(hq, wq) and torch.equal(hs[..., 0], ws[..., 0]) and torch.equal(ids, ids_q)
    same = same and torch.equal(rw, rw_q) and torch.allclose(hs, ws, rtol=1e-5, atol=1e-6)  # sums: any order
    print(f"norm-route-quant {0.0 if same else 1.0:.3e} 1e-30")
    h_w, ids_w, rw_w = norm_route(r, nw, 1e-5, w, b, top_k, launch=(512, 4))  # one 512-wide router step
    ok = torch.equal(h_w, h) and torch.equal(ids_w, ids)
    print(f"norm-route-bk512 {(rw_w - rw).abs().max().item() if ok else 1.0:.3e} 1e-6")


def run_all(device: str, gen: torch.Generator, cuda_shapes: bool = False) -> None:
    dims = (4, 2, 64, 96)
    ids = torch.tensor([1, 0, 1, 3, 2, 1, 0, 3, 1, 2])  # 5 tokens: expert 1 in 4 of them
    kernels_case(device, "T5", ids, gen, dims)
    kernels_case(device, "T1", torch.tensor([3, 1]), gen, dims, old=False)  # TM 1: one pair per group
    crowd = torch.tensor([1, 1, 1, 1, 1, 0, 1, 1])  # 4 tokens, TM 4: expert 1's 7 pairs in 2 runs
    kernels_case(device, "crowd", crowd, gen, dims, launches=((64, 2, 4), (16, 2, 2)), old=False)
    mlp_case(device, gen, tokens=3)
    norm_route_quant_case(device, gen)
    if cuda_shapes:  # gpt-oss-20b's experts: 32 x 2880 x 2880, top 4, 8 tokens
        g_ids = torch.stack([torch.randperm(32, generator=gen)[:4] for _ in range(8)]).reshape(-1)
        kernels_case(device, "gpt-oss-T8", g_ids, gen, (32, 4, 2880, 2880))


if __name__ == "__main__":
    run_all("cpu", torch.Generator().manual_seed(0))
