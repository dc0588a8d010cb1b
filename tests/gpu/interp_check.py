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


def attention_cases():
    for seq_lens, splits in [([1, 5, 70], 1), ([3, 200], 4), ([130], None)]:
        q, k, v, tables, sl = random_paged_case(seq_lens, 6, 2, 32, 16, torch.float32, "cpu", seed=1)
        out = paged_decode_attention(q, k, v, tables, sl, 0.2, num_splits=splits)
        ref = dense_reference(q, k, v, tables, sl, 0.2)
        err = float((out.double() - ref).norm() / ref.norm())
        print(f"attn-{'_'.join(map(str, seq_lens))}-s{splits} {err:.3e} 1e-5")


if __name__ == "__main__":
    linear_cases()
    attention_cases()
