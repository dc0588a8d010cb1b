"""shard_model: rewrite a loaded DecoderModel in place into one rank's tensor-parallel shard.

Per block: q/k/v keep this rank's heads (column-parallel), o_proj keeps the matching input columns and
all-reduces; gate/up keep a block-aligned range of FFN rows, down the same columns and all-reduces.
So each block does two all-reduces. Embedding and LM head split the vocabulary (see layers.py).
The model classes need no hooks: Attention reads its head counts from the attributes set here, and
the KV cache is sized from the returned (local) config, so each rank's cache holds only its KV heads.
"""

from __future__ import annotations

import dataclasses

import torch

from orcd.distributed.layers import (
    RowParallelLinear,
    VocabParallelEmbedding,
    VocabParallelHead,
    slice_cols,
    slice_rows,
)
from orcd.distributed.partition import RankPlan, TensorParallelError, plan_rank
from orcd.gguf.config import ModelConfig
from orcd.quant import QuantEmbedding, QuantLinear
from orcd.quant.registry import get_format


def _shard_block(i: int, blk, cfg: ModelConfig, plan: RankPlan, rank: int, group,
                 device: torch.device | None) -> None:
    a, d, ffn = blk.attn, cfg.head_dim, plan.ffn
    (q0, q1), (k0, k1) = plan.heads.q, plan.heads.kv
    a.q_proj = slice_rows(a.q_proj, q0 * d, q1 * d, device)
    a.k_proj = slice_rows(a.k_proj, k0 * d, k1 * d, device)
    a.v_proj = slice_rows(a.v_proj, k0 * d, k1 * d, device)
    o = slice_cols(a.o_proj, q0 * d, q1 * d, f"blk.{i}.attn_output.weight", rank == 0, device)
    a.o_proj = RowParallelLinear(o, group)
    a.n_heads, a.n_kv_heads = q1 - q0, k1 - k0
    m = blk.mlp
    m.gate = slice_rows(m.gate, *ffn, device)
    m.up = slice_rows(m.up, *ffn, device)
    m.down = RowParallelLinear(slice_cols(m.down, *ffn, f"blk.{i}.ffn_down.weight", rank == 0, device), group)


def shard_model(model, cfg: ModelConfig, rank: int, world_size: int, group=None,
                device: torch.device | str | None = None) -> ModelConfig:
    """Keep rank `rank`'s shard of `model` (a loaded DecoderModel, full weights) and move it to `device`
    (default: where it is). Returns the rank-local config (n_heads, n_kv_heads, ffn_size of the shard)
    to size the KV cache with. Collectives run on `group` (default: the world group)."""
    if not 0 <= rank < world_size:
        raise TensorParallelError(f"rank {rank} is outside a world of {world_size}")
    if world_size == 1:
        return cfg
    dev = torch.device(device) if device is not None else None
    for i, blk in enumerate(model.blocks):
        for name, m in (("attn_output", blk.attn.o_proj), ("ffn_down", blk.mlp.down)):
            if not isinstance(m, QuantLinear):
                raise TensorParallelError(f"blk.{i}.{name}.weight is already sharded")
    o_blocks = [get_format(b.attn.o_proj.qtype).block_size for b in model.blocks]
    down_blocks = [get_format(b.mlp.down.qtype).block_size for b in model.blocks]
    plan = plan_rank(cfg, o_blocks, down_blocks, world_size, rank)  # fails before anything is rewritten
    for i, blk in enumerate(model.blocks):
        _shard_block(i, blk, cfg, plan, rank, group, dev)

    vocab = plan.vocab
    v0, v1 = vocab[rank]
    tied = model.lm_head is model.embed.as_linear()
    table = slice_rows(model.embed.as_linear(), v0, v1, dev)
    model.embed = VocabParallelEmbedding(QuantEmbedding(table), v0, v1, group)
    head = table if tied else slice_rows(model.lm_head, v0, v1, dev)
    model.lm_head = VocabParallelHead(head, vocab, rank, group)

    if dev is not None:  # what is left: norms (parameters) and the rotary table (a plain tensor)
        model.to(dev)
        model.rotary.inv_freq = model.rotary.inv_freq.to(dev)
    (q0, q1), (k0, k1), (f0, f1) = plan.heads.q, plan.heads.kv, plan.ffn
    return dataclasses.replace(cfg, n_heads=q1 - q0, n_kv_heads=k1 - k0, ffn_size=f1 - f0)
