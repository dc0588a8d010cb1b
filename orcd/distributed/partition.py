"""Which slice of each tensor a rank owns: attention heads, KV heads, FFN columns, vocabulary rows.

Pure arithmetic on ints, no torch. Ranges are half-open [start, stop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orcd.errors import OrcdError


class TensorParallelError(OrcdError):
    """The model cannot be split over the requested number of ranks (or the ranks disagree)."""


@dataclass(frozen=True)
class HeadSplit:
    q: tuple[int, int]  # query heads of this rank
    kv: tuple[int, int]  # KV heads of this rank (one replicated head when n_kv_heads < world)


def split_heads(n_heads: int, n_kv_heads: int, world: int, rank: int) -> HeadSplit:
    """Query heads split evenly; KV heads split evenly, or replicated when fewer than ranks.

    Query head h reads KV head h // (n_heads // n_kv_heads); the ranges keep that pairing local."""
    if n_heads % world:
        raise TensorParallelError(f"{n_heads} attention heads do not split evenly over {world} ranks")
    q_local = n_heads // world
    if n_kv_heads >= world:
        if n_kv_heads % world:
            raise TensorParallelError(f"{n_kv_heads} KV heads do not split evenly over {world} ranks")
        kv_local = n_kv_heads // world
        kv0 = rank * kv_local
    else:  # replication: world / n_kv ranks share each KV head
        if world % n_kv_heads:
            raise TensorParallelError(f"{n_kv_heads} KV heads cannot be replicated evenly over {world} ranks")
        kv_local, kv0 = 1, rank * n_kv_heads // world
    q0, group = rank * q_local, n_heads // n_kv_heads
    assert q0 // group >= kv0 and (q0 + q_local - 1) // group < kv0 + kv_local  # pairing stays local
    return HeadSplit((q0, q0 + q_local), (kv0, kv0 + kv_local))


def split_units(n: int, unit: int, world: int, rank: int, what: str) -> tuple[int, int]:
    """[start, stop) of n elements cut into whole `unit`s, balanced (sizes differ by at most one unit).

    Raises when n is not whole units or some rank would get none; `what` names the dimension."""
    if n % unit:
        raise TensorParallelError(f"{what}: {n} is not a multiple of the block size {unit}")
    units = n // unit
    if units < world:
        raise TensorParallelError(f"{what}: {units} blocks of {unit} cannot be split over {world} ranks")
    base, extra = divmod(units, world)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return start * unit, stop * unit


def all_splits(n: int, unit: int, world: int, what: str) -> list[tuple[int, int]]:
    return [split_units(n, unit, world, r, what) for r in range(world)]


@dataclass(frozen=True)
class RankPlan:
    heads: HeadSplit
    ffn: tuple[int, int]  # FFN columns (gate/up rows, down columns)
    vocab: list[tuple[int, int]]  # every rank's vocabulary rows (the head all-gathers them in order)


def plan_rank(cfg, o_blocks: list[int], down_blocks: list[int], world: int, rank: int) -> RankPlan:
    """This rank's slices. o_blocks / down_blocks: block size of each layer's attn_output / ffn_down type.

    Raises TensorParallelError (naming the tensor) when this rank's attn_output input columns are not
    whole blocks; FFN columns are cut in whole blocks of every layer's ffn_down type."""
    heads = split_heads(cfg.n_heads, cfg.n_kv_heads, world, rank)
    c0, c1 = heads.q[0] * cfg.head_dim, heads.q[1] * cfg.head_dim
    for i, bs in enumerate(o_blocks):
        if c0 % bs or c1 % bs:
            raise TensorParallelError(
                f"blk.{i}.attn_output.weight: input columns [{c0}, {c1}) of rank {rank} are not whole blocks "
                f"of {bs}; use fewer ranks, or a file with another type for this tensor")
    unit = math.lcm(1, *down_blocks)
    ffn = split_units(cfg.ffn_size, unit, world, rank, "feed_forward_length (ffn_down.weight columns)")
    return RankPlan(heads, ffn, all_splits(cfg.vocab_size, 1, world, "vocab_size"))


def check_file_shardable(f, cfg, world: int) -> None:
    """Every rank's plan for a GGUF file (before any process starts); raises TensorParallelError."""
    from orcd.quant.registry import get_format

    def blocks(name: str) -> list[int]:
        return [get_format(f.tensors[f"blk.{i}.{name}.weight"].qtype).block_size for i in range(cfg.n_layers)]

    o, down = blocks("attn_output"), blocks("ffn_down")
    for rank in range(world):
        plan_rank(cfg, o, down, world, rank)
