"""Run under TRITON_INTERPRET=1 (by test_dense_decode.py): FusedDecoder(dense_rows=5) against the quantized
route (FusedDecoder()) on a synthesized tiny-qwen2-256 Q4_K_M (Q4_K and Q6_K weights, q/k/v biases).
Float32 (the interpreter's bf16 is not the GPU's: bf16 runs in the GPU test). Prints `name value
tolerance` lines: each value must be below its tolerance.
  - dense_vs_quantized: relative logits error of one 5-row step against the quantized route (slow under
    the interpreter: one step), tokens_differ_quantized: 0 when both argmaxes agree;
  - dense_vs_dequantized / tokens_differ_dequantized: a 6-row greedy run (3 steps, each step's argmax
    fed back) against the dequantized model's forward (the reference the quantized route is tested on);
  - dense_calls: 1 / (1 + dense steps taken) (< 0.5: the dense route ran);
  - plumbing_differs: 0 when DecodeGraphs.for_engine(dense=) hands the copies to the fused step.
"""

from __future__ import annotations

import os
import sys
import tempfile

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from decode_meta import decode_meta  # noqa: E402

from orcd.cli.synth import synth_like  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.models.kv_cache import KVCache  # noqa: E402
from orcd.runner.decode_graphs import DecodeGraphs  # noqa: E402
from orcd.runner.dense_weights import DenseWeights  # noqa: E402
from orcd.runner.fused_decode import FusedDecoder  # noqa: E402

PAGE = 16


@torch.inference_mode()
def greedy(decs: list, cfg, dtype: torch.dtype, batch: int, steps: int) -> tuple[float, int]:
    """`steps` greedy steps of `batch` rows through each decoder (own caches), each fed its own argmax ->
    (worst relative logits error of decs[1:] against decs[0], steps whose tokens differ)."""
    kvs = [KVCache.allocate(cfg, batch * 2, PAGE, "cpu", dtype) for _ in decs]
    tables = torch.arange(batch * 2, dtype=torch.int32).view(batch, 2)
    first = torch.randint(0, cfg.vocab_size, (batch,), generator=torch.Generator().manual_seed(batch))
    ids = [first] * len(decs)
    pos, worst, differ = torch.arange(batch, dtype=torch.int64) % 3, 0.0, 0
    for _ in range(steps):
        outs = [dec(i, pos, decode_meta(pos, tables, PAGE), kv)  # a fresh metadata per decoder
                for dec, i, kv in zip(decs, ids, kvs, strict=True)]
        for out in outs[1:]:
            worst = max(worst, float((out - outs[0]).norm() / outs[0].norm()))
        ids = [o.argmax(-1) for o in outs]
        differ += int(any(not torch.equal(i, ids[0]) for i in ids[1:]))
        pos = pos + 1
    return worst, differ


class Reference:
    """The dequantized model's forward + compute_logits as a decoder (torch only: fast here)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, ids, pos, meta, kv) -> torch.Tensor:
        return self.model.compute_logits(self.model(ids, pos, meta, kv)).float()


def main(path: str) -> None:
    taken = [0]
    real = DenseWeights.logits

    def counted(self, h):
        taken[0] += 1
        return real(self, h)

    DenseWeights.logits = counted
    quant = load_model(path, "cpu", dtype=torch.float32, keep_quantized=True, tokenizer=False)
    full = load_model(path, "cpu", dtype=torch.float32, keep_quantized=False, tokenizer=False)
    dense = FusedDecoder(quant.model, dense_rows=5)
    assert dense.dense_rows == 5 and dense.dense.nbytes > 0
    err, differ = greedy([FusedDecoder(quant.model), dense], quant.cfg, torch.float32, 5, 1)
    print("dense_vs_quantized", f"{err:.3e}", 1e-5, flush=True)
    print("tokens_differ_quantized", differ, 1, flush=True)
    err, differ = greedy([Reference(full.model), dense], quant.cfg, torch.float32, 6, 3)
    print("dense_vs_dequantized", f"{err:.3e}", 1e-5, flush=True)
    print("tokens_differ_dequantized", differ, 1, flush=True)
    print("dense_calls", f"{1 / (1 + taken[0]):.3f}", 0.5, flush=True)
    # the engine's copies reach the captured step: ModelRunner -> DecodeGraphs.for_engine -> pick_step
    kv = KVCache.allocate(quant.cfg, 9, PAGE, "cpu", torch.float32)
    graphs = DecodeGraphs.for_engine(quant.model, kv, PAGE, 64, 8, scratch_block=8, dense=dense.dense)
    print("plumbing_differs", int(graphs.step_fn.dense is not dense.dense), 1, flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(synth_like(os.path.join(tmp, "m.gguf"), "tiny-qwen2-256", "Q4_K_M")[0])
