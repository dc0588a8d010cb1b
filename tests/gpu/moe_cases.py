"""MoE MXFP4 kernels (orcd/quant/kernels/moe_mxfp4.py, moe_gemv.py) against the torch reference: each case
prints `name rel_err tol`. GEMV cases also check the down projection with the k-slot sum fused (per token)
and that a token's fused output is bitwise the same alone as in the batch (`invariant-...`, tol 1e-30).
GEMV cases also add the summed down projection into a residual in place (`residual-...`). The router:
topk_softmax, and norm_route (the fused decode step's add + RMSNorm + router + top-k + softmax).
Run on CUDA by test_moe_kernels.py, and on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from orcd.models.moe import clamped_swiglu  # noqa: E402
from orcd.quant import dequantize_to  # noqa: E402
from orcd.quant.kernels.moe_gemv import moe_gemv  # noqa: E402
from orcd.quant.kernels.moe_mxfp4 import moe_mxfp4  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402

# per path: the default launch, and one with other tiles (KB 1, 2 and 4 blocks per step: masked K tails)
LAUNCHES = {False: (None, (16, 2, 2)), True: (None, (64, 2, 4))}


# (tokens, grouped): on CUDA every case; under the interpreter (slow) one per kernel
CASES = {"cuda": ((1, False), (3, False), (5, True), (21, True)), "cpu": ((3, False), (5, True))}


def random_mxfp4(e: int, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Raw MXFP4 [e, n, k / 32 * 17] uint8: exponents 2 ** -5 .. 2 ** 2 (halved), random codes."""
    blocks = torch.randint(0, 256, (e * n * k // 32, 17), generator=gen, dtype=torch.uint8)
    blocks[:, 0] = torch.randint(123, 131, (blocks.shape[0],), generator=gen, dtype=torch.uint8)
    return blocks.view(e, n, k // 32 * 17)


def dense(w: torch.Tensor, k: int) -> torch.Tensor:
    e, n, _ = w.shape
    return dequantize_to(w.reshape(e * n, -1), Q.MXFP4, (e * n, k), torch.float32).view(e, n, k)


def reference(x, ids, w, b, rw, top_k, up=None, bu=None):
    """Every expert dequantized, then per pair, in fp32: GLU (up given) or down times rw."""
    rows = x.float()[torch.arange(ids.numel()) // (top_k if up is not None else 1)]
    out = torch.einsum("pk,pnk->pn", rows, dense(w, x.shape[1])[ids]) + b.float()[ids]
    if up is not None:
        u = torch.einsum("pk,pnk->pn", rows, dense(up, x.shape[1])[ids]) + bu.float()[ids]
        return clamped_swiglu(out, u)
    return out * rw.float()[:, None]


def run_case(device: str, dtype: torch.dtype, tokens: int, grouped: bool, gen: torch.Generator):
    n_exp, top_k, hidden, ffn = 6, 2, 96, 160  # 3 and 5 blocks: not multiples of KB or the tiles
    wg, wu = random_mxfp4(n_exp, ffn, hidden, gen), random_mxfp4(n_exp, ffn, hidden, gen)
    wd = random_mxfp4(n_exp, hidden, ffn, gen)
    bg, bu, bd = (torch.randn(n_exp, m, generator=gen) * 0.1 for m in (ffn, ffn, hidden))
    x = torch.randn(tokens, hidden, generator=gen) * 0.5
    ids = torch.stack([torch.randperm(n_exp, generator=gen)[:top_k] for _ in range(tokens)]).reshape(-1)
    ids[0:3:2] = 1  # an expert shared by several pairs; with few tokens, some experts unused
    rw = torch.rand(ids.numel(), generator=gen)
    h_ref = reference(x, ids, wg, bg, None, top_k, wu, bu)
    y_ref = reference(h_ref, ids, wd, bd, rw, top_k)

    def dev(t):
        return t.to(device)

    def split(w):  # the kernels' layout, made in place on a device copy
        return split_blocks_(dev(w).clone())

    sg, su, sd = split(wg), split(wu), split(wd)
    for launch in LAUNCHES[grouped] if device == "cuda" else (None,):  # the interpreter: the defaults
        h = moe_mxfp4(dev(x).to(dtype), dev(ids), sg, su, dev(bg).to(dtype), dev(bu).to(dtype), None, top_k,
                      grouped=grouped, launch=launch)
        y = moe_mxfp4(dev(h_ref).to(dtype), dev(ids), sd, None, dev(bd).to(dtype), None, dev(rw), top_k,
                      grouped=grouped, launch=launch)
        name = f"{'grouped' if grouped else 'gemv'}{launch or ''}-T{tokens}-{str(dtype)[6:]}"
        report(name, h, y, h_ref, y_ref, dtype)
        if not grouped:
            check_sum(name, dev, h_ref, ids, sd, bd, rw, y_ref, tokens, top_k, dtype, launch)


def check_sum(name, dev, h_ref, ids, sd, bd, rw, y_ref, tokens, top_k, dtype, launch):
    """The down GEMV with the k slots summed per token (slots = top_k), and token 1 alone vs in the batch."""
    def down(rows):
        return moe_gemv(dev(h_ref[rows]).to(dtype), dev(ids[rows]), sd, None, dev(bd).to(dtype), None,
                        dev(rw[rows]), top_k, slots=top_k, launch=launch)

    ysum = down(slice(None))  # [T, N]
    ref = y_ref.view(tokens, top_k, -1).sum(1)
    err = ((ysum.float().cpu() - ref).norm() / ref.norm()).item()
    print(f"sum-{name.replace(' ', '')} {err:.3e} {1e-5 if dtype == torch.float32 else 2e-2}")
    if tokens > 1:
        diff = (down(slice(top_k, 2 * top_k)).float() - ysum[1:2].float()).abs().max().item()
        print(f"invariant-{name.replace(' ', '')} {diff:.3e} 1e-30")
    res = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    got = moe_gemv(dev(h_ref).to(dtype), dev(ids), sd, None, dev(bd).to(dtype), None, dev(rw), top_k,
                   slots=top_k, launch=launch, residual=dev(res).to(dtype).clone())  # += the sum
    err = ((got.float().cpu() - (res + ref)).norm() / (res + ref).norm()).item()
    print(f"residual-{name.replace(' ', '')} {err:.3e} {1e-5 if dtype == torch.float32 else 2e-2}")


def report(name, h, y, h_ref, y_ref, dtype):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for what, got, ref in (("glu", h, h_ref), ("down", y, y_ref)):
        err = ((got.float().cpu() - ref).norm() / ref.norm()).item()
        print(f"{what}-{name.replace(' ', '')} {err:.3e} {tol}")


def router_case(device: str, gen: torch.Generator) -> None:
    """topk_softmax (one launch) on x @ w.T + b against torch in fp32: topk, softmax over the k; experts 5 and
    9 tie at the top on every token (the kernel takes the lower index first; torch's order is unspecified)."""
    from orcd.quant.kernels.moe_router import topk_softmax

    t, h, e, k = 7, 200, 12, 4
    x, w = torch.randn(t, h, generator=gen), torch.randn(e, h, generator=gen) * 0.1
    b = torch.randn(e, generator=gen)
    w[5], b[5], b[9] = w[9], 9.0, 9.0  # experts 5 and 9: the two largest logits on every token, equal
    logits = x @ w.T + b
    ids, rw = (r.cpu() for r in topk_softmax(logits.to(device), k))
    top, want = torch.topk(logits, k, dim=-1)
    ok = torch.equal(ids.sort(1).values, want.sort(1).values)  # the same experts
    ok &= torch.allclose(logits.gather(1, ids), top, rtol=0, atol=1e-5)  # in descending order
    ok &= bool((ids[:, 0] == 5).all() and (ids[:, 1] == 9).all())
    err = (rw - torch.softmax(top, -1)).abs().max().item() if ok else 1.0
    print(f"router-fp32 {err:.3e} 1e-6")


def norm_route_case(device: str, gen: torch.Generator) -> None:
    """norm_route (one launch: residual += delta, RMSNorm, router GEMV + bias, top-k, softmax) against
    torch in fp32: the updated residual, h, the same experts in descending order, the weights; twice on
    one counter (as every layer shares it), which each launch must leave at zero."""
    from orcd.quant.kernels.moe_router import norm_route, route_counter

    t, h, e, k, eps = 5, 200, 12, 4, 1e-5  # h: not a power of two (masked tail)
    nw, w = torch.rand(h, generator=gen) + 0.5, torch.randn(e, h, generator=gen) * 0.2
    b = torch.randn(e, generator=gen)
    counter = route_counter(8, device)
    errs, ok = [], True
    for _ in range(2):
        res, delta = torch.randn(t, h, generator=gen), torch.randn(t, h, generator=gen)
        r_dev = res.to(device).clone()  # updated in place
        hn, ids, rw = (x.cpu() for x in norm_route(r_dev, nw.to(device), eps, w.to(device), b.to(device), k,
                                                   delta.to(device), counter=counter))
        r = res + delta
        h_ref = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * nw
        top, want = torch.topk(h_ref @ w.T + b, k, dim=-1)
        errs += [(r_dev.cpu() - r).abs().max().item(), (hn - h_ref).abs().max().item(),
                 (rw - torch.softmax(top, -1)).abs().max().item()]
        ok &= torch.equal(ids, want) and not counter.cpu().any()
    print(f"norm-route-fp32 {max(errs) if ok else 1.0:.3e} 1e-5")


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = (torch.float32, torch.bfloat16) if device == "cuda" else (torch.float32,)
    gen = torch.Generator().manual_seed(0)
    for dtype in dtypes:
        for tokens, grouped in CASES[device]:
            run_case(device, dtype, tokens, grouped, gen)
    router_case(device, gen)
    norm_route_case(device, gen)


if __name__ == "__main__":
    main()
