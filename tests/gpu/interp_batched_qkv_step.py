"""Run under TRITON_INTERPRET=1 (by test_batched_qkv.py): FusedDecoder(batched_qkv=True) taking 5 rows
(above GEMV_MAX_N: the unfused step, q/k/v in one batched_qkv launch) against the dequantized model's
forward, float32, a synthesized tiny-qwen2-256 (q/k/v biases, widths % 256 == 0). Prints
`name rel_err tolerance` and the count of batched_qkv calls (> 0: the path ran).
"""

from __future__ import annotations

import os
import sys
import tempfile

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from interp_fused_rows import worst_error  # noqa: E402

import orcd.runner.decode_products as products_mod  # noqa: E402
from orcd.cli.synth import synth_like  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.runner.fused_decode import FusedDecoder  # noqa: E402


def main(path: str) -> None:
    calls = [0]
    real = products_mod.batched_qkv

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    products_mod.batched_qkv = counted
    quant = load_model(path, "cpu", dtype=torch.float32, keep_quantized=True, tokenizer=False)
    full = load_model(path, "cpu", dtype=torch.float32, keep_quantized=False, tokenizer=False)
    dec = FusedDecoder(quant.model, batched_qkv=True)
    print("batched_qkv_batch5", f"{worst_error(dec, full, 5, 2):.3e}", 1e-4, flush=True)
    print("batched_qkv_calls", calls[0], flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(synth_like(os.path.join(tmp, "m.gguf"), "tiny-qwen2-256", "Q8_0")[0])
