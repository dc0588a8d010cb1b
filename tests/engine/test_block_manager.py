import pytest

from orcd.engine.block_manager import BlockManager
from orcd.engine.sampling_params import SamplingParams
from orcd.engine.sequence import Sequence


def seq(tokens):
    return Sequence("r", list(tokens), SamplingParams())


def compute(bm: BlockManager, s: Sequence, n: int) -> None:
    """What the scheduler + runner do for n tokens: get slots, compute, register full blocks."""
    assert bm.append_slots(s, n)
    s.num_computed += n
    bm.cache_full_blocks(s)


def test_allocate_and_free_keep_counts_consistent():
    bm = BlockManager(8, 4)
    a, b = seq(range(10)), seq(range(100, 105))
    compute(bm, a, 10)
    compute(bm, b, 5)
    assert len(a.block_table) == 3 and len(b.block_table) == 2
    assert bm.num_free_blocks == 3
    bm.check_integrity([a, b])
    bm.free_seq(a)
    bm.check_integrity([b])
    assert bm.num_free_blocks == 6
    with pytest.raises(AssertionError):
        bm.check_integrity([a, b, b])  # b counted twice: ref counts disagree


def test_out_of_blocks_allocates_nothing():
    bm = BlockManager(2, 4)
    s = seq(range(9))
    assert not bm.append_slots(s, 9)
    assert s.block_table == [] and bm.num_free_blocks == 2
    bm.check_integrity([s])


def test_double_free_is_detected():
    bm = BlockManager(4, 4)
    s = seq(range(4))
    compute(bm, s, 4)
    table = list(s.block_table)
    bm.free_seq(s)
    s.block_table = table
    with pytest.raises(AssertionError, match="double free"):
        bm.free_seq(s)


def test_prefix_hit_shares_blocks_and_leaves_one_token():
    bm = BlockManager(16, 4)
    a = seq(range(13))  # 3 full blocks + 1 token
    compute(bm, a, 13)
    b = seq([*range(12), 99, 98])  # shares the 3 full blocks
    assert bm.take_prefix(b) == 12
    assert b.block_table == a.block_table[:3]
    assert all(bm.blocks[i].ref_count == 2 for i in b.block_table)
    bm.check_integrity([a, b])
    c = seq(range(12))  # exactly 3 blocks: the last one is recomputed so the step can sample
    assert bm.take_prefix(c) == 8
    bm.check_integrity([a, b, c])


def test_hash_chains_over_the_whole_prefix():
    bm = BlockManager(16, 4)
    a = seq([1, 2, 3, 4, 5, 6, 7, 8, 0])
    compute(bm, a, 9)
    b = seq([9, 9, 9, 9, 5, 6, 7, 8, 0])  # second block equal, first differs: no hit at all
    assert bm.take_prefix(b) == 0


def test_freed_cached_blocks_are_reused_until_evicted_lru():
    bm = BlockManager(6, 4)
    a = seq(range(9))
    compute(bm, a, 9)  # blocks: 2 full (cached) + 1 partial
    cached = a.block_table[:2]
    bm.free_seq(a)
    assert bm.num_free_blocks == 6
    b = seq([*range(8), 50, 51])
    assert bm.take_prefix(b) == 8 and b.block_table == cached
    bm.count_admission(b)
    assert (bm.prefix_hits, bm.prefix_queries) == (8, 10)
    bm.free_seq(b)
    # Fill the pool with unrelated tokens: the cached blocks go last, then are evicted.
    c = seq(range(200, 216))
    compute(bm, c, 16)
    d = seq([*range(8), 7])
    assert bm.take_prefix(d) == 8  # 4 blocks were enough without evicting them
    bm.free_seq(d)
    e = seq(range(300, 308))
    compute(bm, e, 8)  # needs 2 blocks: only the cached ones are left -> evicted
    f = seq([*range(8), 7])
    assert bm.take_prefix(f) == 0
    bm.check_integrity([c, e, f])


def test_partial_last_block_is_not_cached():
    bm = BlockManager(8, 4)
    a = seq(range(6))
    compute(bm, a, 6)
    assert len(bm.cached) == 1
    a.append_token(6)
    a.append_token(7)
    compute(bm, a, 2)  # block 2 becomes full now
    assert len(bm.cached) == 2 and a.block_hashes == [bm.blocks[i].hash for i in a.block_table]
