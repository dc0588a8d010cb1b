"""GptOssDecoder(fuse_quant=True): each producer that quantizes its own output against quantize_x of that
output, and the fused int8 step against the unfused one. Prints `name err tol` per case, err the number
of differing int8 words plus scales (dx) — 0 required, tolerance 0.5 — except where the gate/up launch's
BN differs from the unfused one's (compiled, its per-row float sums may be reduced in another order): the
GLU output against the default launch's (1 % of words + scales on CUDA) and the step, whose err is the
largest |logit difference| (0 required under the interpreter, 1e-2 on CUDA).
Sums of x (xs[..., 1:3]) are compared too where bit-equal is promised (the interpreter; on CUDA a
reduction's order may differ between layouts; no consumer of these producers reads them).
- norm_route(quant=True): bf16 and fp32, H = 96 (not a power of two: masked blocks), with a delta;
- paged_decode_attention(quant=True): D = 64 (gpt-oss), 4 splits with sinks (the merge kernel writes
  them), and 1 split (quantize_x itself);
- moe_gemv_i8(quant_out=True), the gate/up epilogue, against quantize_x of the same launch's output and
  of the default launch's;
- the int8 step (tiny fp32 gpt-oss file, 1 row, block tables widened so the global layer's attention
  takes 3 splits and the merge kernel) with fuse_quant on and off.
Run on CUDA by test_gpt_oss_fuse_quant.py, on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from moe_cases import random_mxfp4  # noqa: E402

from orcd.models.layers.attention_triton import paged_decode_attention  # noqa: E402
from orcd.quant.kernels.moe_mxfp4_int8 import moe_gemv_i8  # noqa: E402
from orcd.quant.kernels.moe_router import norm_route  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402
from orcd.quant.mxfp4 import split_blocks_  # noqa: E402


def mismatches(got: tuple, want: tuple, sums: bool) -> int:
    """Differing words + scales (+ the two sums of x per block when sums) between two quantize_x results."""
    (gq, gs), (wq, ws) = got, want
    n = int((gq != wq).sum()) + int((gs[..., 0] != ws[..., 0]).sum())
    return n + (int((gs[..., 1:3] != ws[..., 1:3]).sum()) if sums else 0)


def route_cases(dev: str, gen: torch.Generator, sums: bool, dims=(3, 96, 8)) -> None:
    t, hid, n_exp = dims
    for dtype in (torch.bfloat16, torch.float32):
        res = torch.randn(t, hid, generator=gen).to(dev, dtype)
        delta = torch.randn(t, hid, generator=gen).to(dev, dtype)
        nw = (torch.rand(hid, generator=gen) + 0.5).to(dev, dtype)
        w_r = (torch.randn(n_exp, hid, generator=gen) * 0.1).to(dev, dtype)
        b_r = torch.zeros(n_exp).to(dev, dtype)
        r2 = res.clone()
        h, ids, rw, hq = norm_route(res, nw, 1e-5, w_r, b_r, 2, delta, quant=True)
        h2, ids2, rw2 = norm_route(r2, nw, 1e-5, w_r, b_r, 2, delta)
        same = torch.equal(h, h2) and torch.equal(ids, ids2) and torch.equal(rw, rw2) and torch.equal(res, r2)
        err = mismatches(hq, quantize_x(h), sums) + (0 if same else 1000)
        print(f"norm-route-{str(dtype)[6:]}-T{t} {err} 0.5")


def attention_cases(dev: str, gen: torch.Generator, sums: bool, dims=(2, 4, 2)) -> None:
    (b, hq, hkv), d, page, nblk = dims, 64, 4, 24
    kc = torch.randn(nblk, page, hkv, d, generator=gen).to(dev, torch.bfloat16)
    vc = torch.randn(nblk, page, hkv, d, generator=gen).to(dev, torch.bfloat16)
    q = torch.randn(b, hq, d, generator=gen).to(dev, torch.bfloat16)
    tables = torch.randint(0, nblk, (b, 10), generator=gen).to(dev, torch.int32)
    seq_lens = torch.tensor([37, 11, 40, 2, 25, 1, 33, 19][:b], dtype=torch.int32, device=dev)
    sinks = torch.randn(hq, generator=gen).to(dev)
    for splits in (4, 1):
        args = (q, kc, vc, tables, seq_lens, 0.125, splits)
        out, oq = paged_decode_attention(*args, sinks=sinks, quant=True)
        plain = paged_decode_attention(*args, sinks=sinks)
        err = mismatches(oq, quantize_x(plain.view(b, -1)), sums) + (0 if torch.equal(out, plain) else 1000)
        print(f"attn-merge-s{splits}-B{b} {err} 0.5")


def glu_cases(dev: str, gen: torch.Generator, sums: bool, dims=(4, 2, 64, 64, 2)) -> None:
    n_exp, top_k, hid, ffn, t = dims  # ffn 64: 2 blocks of 32 (BN 32: one program each)
    wg, wu = (split_blocks_(random_mxfp4(n_exp, ffn, hid, gen).to(dev)) for _ in range(2))
    bg, bu = ((torch.randn(n_exp, ffn, generator=gen) * 0.1).to(dev) for _ in range(2))
    x = torch.randn(t, hid, generator=gen).to(dev, torch.bfloat16)
    ids = torch.stack([torch.randperm(n_exp, generator=gen)[:top_k] for _ in range(t)]).view(-1).to(dev)
    xq = quantize_x(x)
    aq = moe_gemv_i8(xq, ids, wg, wu, bg, bu, None, top_k, quant_out=True)
    for name, launch in (("same-launch", (32, 16, 4)), ("default-launch", None)):
        act = moe_gemv_i8(xq, ids, wg, wu, bg, bu, None, top_k, launch=launch)
        # compiled, BN 8 against 32 may sum a row's KB partials in another order: 1 % of words + dx may differ
        tol = 0.5 if sums or launch else aq[0].numel() * 0.01 * 9 / 8
        print(f"glu-quant-{name}-T{t} {mismatches(aq, quantize_x(act), sums)} {tol}")


def step_case(dev: str, dtype: torch.dtype) -> float:
    """Largest |logit difference| between the int8 step with fuse_quant on and off (same inputs, 1 row: the
    kernel cases above cover rows past the first)."""
    from gpt_oss_fused_cases import BLOCKS, decode_step, setup, step_inputs

    from orcd.runner.fused_gpt_oss import GptOssDecoder

    model, kv, seqs = setup(dev, dtype)
    ids, pos, slots, seq_lens, tables = (t.to(dev) for t in step_inputs(seqs[:1]))
    wide = torch.full((1, 48), BLOCKS - 1, dtype=torch.int32, device=dev)  # 192 slots: 3 splits
    wide[:, : tables.shape[1]] = tables
    inputs = (ids, pos, slots, seq_lens, wide)
    got = [decode_step(GptOssDecoder(model, int8_moe=True, int8_attn=True, fuse_quant=f), model, kv, inputs)
           for f in (True, False)]
    return (got[0].float() - got[1].float()).abs().max().item()


def gpt_oss_shapes(dev: str, rows: int) -> None:
    """The kernel cases at gpt-oss-20b's shapes (hidden 2880, 32 experts, 64 / 8 heads, top 4) on CUDA."""
    gen = torch.Generator().manual_seed(rows)
    route_cases(dev, gen, False, dims=(rows, 2880, 32))
    attention_cases(dev, gen, False, dims=(rows, 64, 8))
    glu_cases(dev, gen, False, dims=(32, 4, 2880, 2880, rows))


def main() -> None:
    torch.set_num_threads(1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    sums = dev == "cpu"  # the interpreter: every reduction in numpy's order
    route_cases(dev, gen, sums)
    attention_cases(dev, gen, sums)
    glu_cases(dev, gen, sums)
    print(f"int8-step-fused-vs-unfused {step_case(dev, torch.float32):.3e} {1e-9 if dev == 'cpu' else 1e-2}")


if __name__ == "__main__":
    main()
