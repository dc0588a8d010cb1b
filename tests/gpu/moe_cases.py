"""MoE MXFP4 kernels (orcd/quant/kernels/moe_mxfp4.py) against the torch reference: each case prints
`name rel_err tol`. Run on CUDA by test_moe_kernels.py, and on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from orcd.models.moe import clamped_swiglu  # noqa: E402
from orcd.quant import dequantize_to  # noqa: E402
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


def report(name, h, y, h_ref, y_ref, dtype):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for what, got, ref in (("glu", h, h_ref), ("down", y, y_ref)):
        err = ((got.float().cpu() - ref).norm() / ref.norm()).item()
        print(f"{what}-{name.replace(' ', '')} {err:.3e} {tol}")


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = (torch.float32, torch.bfloat16) if device == "cuda" else (torch.float32,)
    gen = torch.Generator().manual_seed(0)
    for dtype in dtypes:
        for tokens, grouped in CASES[device]:
            run_case(device, dtype, tokens, grouped, gen)


if __name__ == "__main__":
    main()
