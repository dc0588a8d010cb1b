"""Run under TRITON_INTERPRET=1 (by test_interpreter.py): every kernel on the CPU vs its reference.

Prints one line per case: `name rel_err tolerance`.
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from attn_ref import dense_reference, random_paged_case  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gpu_blocks import random_blocks, reference, rel_err  # noqa: E402

from orcd.models.layers.attention_triton import paged_decode_attention  # noqa: E402
from orcd.quant.kernels import get_fused_linear  # noqa: E402


def linear_cases():
    for qt, in_f in [(T.Q8_0, 96), (T.Q5_0, 320), (T.Q4_K, 512), (T.Q6_K, 256)]:
        for n, dtype, tol in [(1, torch.float32, 1e-5), (2, torch.bfloat16, 1e-2), (8, torch.float32, 1e-5),
                              (17, torch.float32, 1e-5)]:
            raw = random_blocks(qt, 12, in_f, seed=n)
            x = torch.randn(n, in_f, generator=torch.Generator().manual_seed(n)).to(dtype)
            y = get_fused_linear(qt, "cpu")(x, raw, 12, in_f)
            assert y.shape == (n, 12) and y.dtype == dtype
            print(f"{qt.name}-n{n}-{dtype} {rel_err(y, reference(x, raw, qt, 12, in_f)):.3e} {tol}")


def fusion_cases():
    """RMSNorm prologue + bias, residual epilogue, split-K, SwiGLU and q/k/v kernels (float32)."""
    from orcd.quant.kernels.fused_linear import fused_gemv, fused_glu, launch_gemv
    from orcd.quant.kernels.gemv_multi import fused_gemv3

    g = torch.Generator().manual_seed(3)
    for qt, in_f in [(T.Q5_0, 320), (T.Q4_K, 768), (T.Q6_K, 768)]:
        raw, raw2 = random_blocks(qt, 12, in_f, seed=1), random_blocks(qt, 12, in_f, seed=2)
        x, nw, bias = torch.randn(2, in_f, generator=g), torch.randn(in_f, generator=g), torch.randn(12)
        xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * nw
        y = fused_gemv(x, raw, 12, in_f, qt, bias, norm=(nw, 1e-6))
        print(f"norm-bias-{qt.name} {rel_err(y, reference(xn, raw, qt, 12, in_f) + bias.double()):.3e} 1e-5")
        glu = fused_glu(x, raw, raw2, 12, in_f, qt, norm=(nw, 1e-6))
        a, b = reference(xn, raw, qt, 12, in_f), reference(xn, raw2, qt, 12, in_f)
        print(f"glu-{qt.name} {rel_err(glu, torch.nn.functional.silu(a) * b):.3e} 1e-5")
        for splits in (2, 3):  # G = 2 groups per pass: several passes to split
            res = torch.randn(2, 12, generator=g)
            y = res.clone()
            launch_gemv(x, raw, y, int(qt), 12, in_f, 2, 4, 1, splits, res=True)
            want = reference(x, raw, qt, 12, in_f) + res.double()
            print(f"splitk{splits}-res-{qt.name} {rel_err(y, want):.3e} 1e-5")
    x, nw = torch.randn(1, 256, generator=g), torch.randn(256, generator=g)
    xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * nw
    specs = [(T.Q5_0, 16), (T.Q4_K, 8), (T.Q8_0, 4)]
    raws = [random_blocks(qt, o, 256, seed=i) for i, (qt, o) in enumerate(specs)]
    ws = [(r, o, qt, None) for r, (qt, o) in zip(raws, specs, strict=True)]
    ys = fused_gemv3(x, ws, 256, norm=(nw, 1e-6))
    err = max(rel_err(y, reference(xn, r, qt, o, 256)) for y, r, (qt, o) in zip(ys, raws, specs, strict=True))
    print(f"gemv3 {err:.3e} 1e-5")


def attention_cases():
    for seq_lens, splits in [([1, 5, 70], 1), ([3, 200], 4), ([130], None)]:
        q, k, v, tables, sl = random_paged_case(seq_lens, 6, 2, 32, 16, torch.float32, "cpu", seed=1)
        out = paged_decode_attention(q, k, v, tables, sl, 0.2, num_splits=splits)
        ref = dense_reference(q, k, v, tables, sl, 0.2)
        err = float((out.double() - ref).norm() / ref.norm())
        print(f"attn-{'_'.join(map(str, seq_lens))}-s{splits} {err:.3e} 1e-5")


if __name__ == "__main__":
    linear_cases()
    fusion_cases()
    attention_cases()
