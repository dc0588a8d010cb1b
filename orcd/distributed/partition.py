"""Which slice of each tensor a rank owns: attention heads, KV heads, FFN columns, vocabulary rows.

Pure arithmetic on ints, no torch. Ranges are half-open [start, stop).
"""

from __future__ import annotations

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
