"""Run under TRITON_INTERPRET=1 (by test_batched_fused.py): FusedDecoder's norm-fused step taking 5 rows
(fused_rows switched up: fused_gemv's RMSNorm / residual and fused_glu's SwiGLU above GEMV_MAX_N rows run
on batched_fused) against the dequantized model's forward, float32, a synthesized tiny-qwen2 Q8_0 (q/k/v
biases). Prints `name rel_err tolerance` and the count of batched_fused calls (> 0: the path ran).
"""

from __future__ import annotations

import os
import tempfile

assert os.environ.get("TRITON_INTERPRET") == "1"

import torch  # noqa: E402
from decode_meta import decode_meta  # noqa: E402 (this script's folder)

import orcd.quant.kernels.fused_linear as fused_mod  # noqa: E402
from orcd.cli.synth import synth_like  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.models.kv_cache import KVCache  # noqa: E402
from orcd.runner.fused_decode import FusedDecoder  # noqa: E402

PAGE = 16


@torch.inference_mode()
def worst_error(dec, full, batch: int, steps: int) -> float:
    """`steps` decode steps of `batch` sequences from position 0 -> the worst relative logits error."""
    cfg = full.cfg
    kv_a = KVCache.allocate(cfg, batch * 2, PAGE, "cpu", torch.float32)
    kv_b = KVCache.allocate(cfg, batch * 2, PAGE, "cpu", torch.float32)
    tables = torch.arange(batch * 2, dtype=torch.int32).view(batch, 2)
    gen = torch.Generator().manual_seed(batch)
    pos, worst = torch.zeros(batch, dtype=torch.int64), 0.0
    for _ in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (batch,), generator=gen)
        meta = decode_meta(pos, tables, PAGE)
        got = dec(ids, pos, meta, kv_a)
        want = full.model.compute_logits(full.model(ids, pos, meta, kv_b)).float()
        worst = max(worst, float((got - want).norm() / want.norm()))
        pos = pos + 1
    return worst


def main(path: str) -> None:
    calls = [0]
    real = fused_mod.batched_fused

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    fused_mod.batched_fused = counted
    quant = load_model(path, "cpu", dtype=torch.float32, keep_quantized=True, tokenizer=False)
    full = load_model(path, "cpu", dtype=torch.float32, keep_quantized=False, tokenizer=False)
    dec = FusedDecoder(quant.model)
    assert dec.fuse_norm
    FusedDecoder.fused_rows = lambda self: 64  # the switch: the norm-fused step at any decode batch
    print("fused_rows_batch5", f"{worst_error(dec, full, 5, 1):.3e}", 1e-4, flush=True)
    print("batched_fused_calls", calls[0], flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(synth_like(os.path.join(tmp, "m.gguf"), "tiny-qwen2", "Q8_0")[0])
