"""Run under TRITON_INTERPRET=1 (by test_tp_fused.py): TPFusedDecoder on 2 gloo ranks against the
unsharded model's forward (weights dequantized, float32), both paths (norms fused at <= GEMV_MAX_N rows,
add+RMSNorm kernels above), several decode steps.

Usage: interp_tp_fused.py MODEL.gguf OUT.json. Rank 0 writes [[case, rel_err], ...] to OUT.json.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from decode_meta import decode_meta  # noqa: E402

from orcd.distributed.driver import load_sharded  # noqa: E402
from orcd.distributed.runtime import launch  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.models.kv_cache import KVCache  # noqa: E402

PAGE = 16


@torch.inference_mode()
def _case(dec, full, ref_cfg, local_cfg, batch: int, steps: int) -> float:
    """Decode `steps` tokens for `batch` sequences from position 0 -> the worst relative error."""
    kv_tp = KVCache.allocate(local_cfg, batch * 2, PAGE, "cpu", torch.float32)
    kv_ref = KVCache.allocate(ref_cfg, batch * 2, PAGE, "cpu", torch.float32)
    tables = torch.arange(batch * 2, dtype=torch.int32).view(batch, 2)
    gen = torch.Generator().manual_seed(batch)  # the same ids on every rank
    pos, worst = torch.zeros(batch, dtype=torch.int64), 0.0
    for _ in range(steps):
        ids = torch.randint(0, ref_cfg.vocab_size, (batch,), generator=gen)
        meta = decode_meta(pos, tables, PAGE)
        got = dec(ids, pos, meta, kv_tp)
        want = full.model.compute_logits(full.model(ids, pos, meta, kv_ref)).float()
        assert got.shape == want.shape, (got.shape, want.shape)
        worst = max(worst, float((got - want).norm() / want.norm()))
        pos = pos + 1
    return worst


def rank_main(ctx, path: str, out: str) -> int:
    from orcd.distributed.fused_tp import TPFusedDecoder

    # raw Q8_0 blocks of this rank's slices
    shard = load_sharded(path, ctx, torch.float32, keep_quantized=True, tokenizer=False)
    full = load_model(path, "cpu", dtype=torch.float32, keep_quantized=False, tokenizer=False)
    dec = TPFusedDecoder(shard.model, ctx.rank, ctx.group)
    assert dec.fuse_norm  # raw blocks everywhere, no o/down/gate/up bias
    rows = []
    # one sequence: norms and residual adds fused; 5 > GEMV_MAX_N: the add+RMSNorm kernels
    # (the interpreter runs a GEMV program in ~10 ms: the cases stay this small)
    for batch, steps in ((1, 2), (5, 1)):  # the second step of batch 1 reads the K/V the first wrote
        rows.append([f"batch{batch}", _case(dec, full, full.cfg, shard.cfg, batch, steps)])
    if ctx.rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(launch(2, "cpu", rank_main, (sys.argv[1], sys.argv[2]), threads=1))
