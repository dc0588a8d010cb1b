"""Run under TRITON_INTERPRET=1 (by test_tp_fused.py): TPFusedDecoder on 2 gloo ranks over a model
of Q4_K/Q6_K weights (the Q4_K_M mix) with the int8-activation GEMVs (decode_products.py) gives the
unsharded model's logits (weights dequantized, float32 forward) within the int8 rounding of x.

- A bf16 shard: the decoder picks the int8 products for every product by itself (flags only: the
  interpreter's bf16 paged attention is wrong, ~1e9 relative error, while the GPU's is right).
- A float32 shard (float x by default) with the int8 products switched on: one decode step of 3
  sequences at positions 5, 17, 2 over a K/V cache filled at random before it (the same values in both
  caches, each rank holding its KV heads). The interpreter takes ~40 ms per GEMV program, so the case
  stays this small.

Usage: interp_tp_int8.py MODEL.gguf OUT.json. Rank 0 writes {"int8": [flags], "err": rel_err}.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from interp_tp_fused import PAGE, decode_meta  # noqa: E402

from orcd.distributed.driver import load_sharded  # noqa: E402
from orcd.distributed.runtime import launch  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.models.kv_cache import KVCache  # noqa: E402


def _caches(full_cfg, local_cfg, rank: int, blocks: int) -> tuple[KVCache, KVCache]:
    """(this rank's cache, the unsharded one), float32, random K/V in both."""
    mine = KVCache.allocate(local_cfg, blocks, PAGE, "cpu", torch.float32)
    ref = KVCache.allocate(full_cfg, blocks, PAGE, "cpu", torch.float32)
    h0, h1 = rank * local_cfg.n_kv_heads, (rank + 1) * local_cfg.n_kv_heads  # heads split in rank order
    gen = torch.Generator().manual_seed(7)  # the same values on every rank
    for full, local in zip(ref.k + ref.v, mine.k + mine.v, strict=True):
        full.copy_(torch.randn(full.shape, generator=gen))
        local.copy_(full[:, :, h0:h1])
    return mine, ref


@torch.inference_mode()
def rank_main(ctx, path: str, out: str) -> int:
    from orcd.distributed.fused_tp import TPFusedDecoder
    from orcd.runner.decode_products import I8_MAX_ROWS, DecodeProducts

    bf16 = TPFusedDecoder(load_sharded(path, ctx, torch.bfloat16, keep_quantized=True, tokenizer=False).model,
                          ctx.rank, ctx.group)
    p = bf16.products
    flags = [bf16.fuse_norm, p.int8_x, all(p.attn_i8(lin) and p.down_i8(lin) for lin in bf16.linears),
             bf16.fused_rows() == I8_MAX_ROWS]
    del bf16
    shard = load_sharded(path, ctx, torch.float32, keep_quantized=True, tokenizer=False)
    full = load_model(path, "cpu", dtype=torch.float32, keep_quantized=False, tokenizer=False)
    tp = TPFusedDecoder(shard.model, ctx.rank, ctx.group)
    flags.append(not tp.products.int8_x)  # float32 models keep float x unless asked
    tp.products = DecodeProducts(int8_x=True, int8_attn=True)
    pos = torch.tensor([5, 17, 2])
    tables = torch.arange(6, dtype=torch.int32).view(3, 2)
    kv_tp, kv_ref = _caches(full.cfg, shard.cfg, ctx.rank, 6)
    ids = torch.tensor([3, 60, 17])
    meta = decode_meta(pos, tables, PAGE)
    got = tp(ids, pos, meta, kv_tp)
    want = full.model.compute_logits(full.model(ids, pos, meta, kv_ref)).float()
    assert got.shape == want.shape, (got.shape, want.shape)
    if ctx.rank == 0:
        with open(out, "w") as f:
            json.dump({"int8": flags, "err": float((got - want).norm() / want.norm())}, f)
    return 0


if __name__ == "__main__":
    sys.exit(launch(2, "cpu", rank_main, (sys.argv[1], sys.argv[2]), threads=1))
