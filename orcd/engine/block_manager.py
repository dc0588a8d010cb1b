"""Paged KV cache bookkeeping in plain Python: fixed-size blocks, ref counts, a prefix cache.

A block is *cached* when it is full, its K/V are computed, and it is registered under the hash of its
tokens chained with the previous block's hash. Cached blocks are shared (ref count > 1) by sequences
with the same prefix. A freed cached block (ref count 0) keeps its hash and stays reusable until the
allocator needs it: free blocks are handed out least-recently-freed first, so that is LRU eviction.

Sliding windows: when EVERY attention layer of the model sees at most the last `window` positions, a
sequence's leading blocks that left the window of all its future queries are released as it advances
(`release_out_of_window`). A model with any full-attention layer (gemma3's global layers, gpt-oss's odd
layers) reads every position of every layer's cache through the one block table, so nothing can be
released there: freeing would need one block table per layer group, which this manager does not keep.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from orcd.engine.sequence import Sequence


def chain_hash(prev_hash: int | None, tokens: tuple[int, ...]) -> int:
    """Hash of a full block's tokens and everything before it (ints and tuples hash deterministically)."""
    return hash((prev_hash, tokens))


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "tokens")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None  # set while registered in the prefix cache
        self.tokens: tuple[int, ...] = ()  # the registered tokens (guards against hash collisions)


def releasable_window(layer_windows: list[int]) -> int:
    """The window blocks can be released by: the largest of the layers' windows when every layer has one
    (> 0), else 0 (a full-attention layer needs every position kept)."""
    return max(layer_windows) if layer_windows and min(layer_windows) > 0 else 0


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 window: int = 0, min_prefix_hit: int = 0):
        """window > 0: every layer attends to at most the last `window` positions (releasable_window).
        min_prefix_hit: a cached prefix shorter than this many tokens is not taken (take_prefix)."""
        if num_blocks < 1 or block_size < 1 or window < 0:
            raise ValueError(f"need num_blocks >= 1, block_size >= 1 and window >= 0, got {num_blocks}, "
                             f"{block_size}, {window}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.window = window
        self.min_prefix_hit = min_prefix_hit
        self.prefix_skipped = 0  # of the prompt tokens looked up, cached ones recomputed (min_prefix_hit)
        self._skipped = 0  # the last take_prefix's, counted by count_admission
        self.released: dict[int, int] = {}  # seq_id -> leading block-table entries released (window > 0)
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))  # LRU first
        self.cached: dict[int, int] = {}  # chain hash -> block id
        self.prefix_queries = 0  # prompt tokens looked up at admission
        self.prefix_hits = 0  # of those, tokens served from cached blocks

    # ---- capacity ----
    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- prefix cache ----
    def take_prefix(self, seq: Sequence) -> int:
        """Attach cached blocks matching seq's leading full blocks; returns tokens now computed.

        Only for a sequence holding no blocks. At least one token is left to compute, so the step that
        finishes the prefix can sample. A match shorter than min_prefix_hit tokens is not taken: seq
        recomputes it. (With prefill CUDA graphs only fresh prompts replay a graph; a step holding a
        cached prefix runs eagerly, ~18 ms more on the H100 for the 0.5B, which recomputing a short
        prefix costs far less than: issue 19, chat prompts sharing their first block.)
        """
        assert not seq.block_table and seq.num_computed == 0, seq
        seq.num_cached_tokens = 0
        if not self.enable_prefix_caching:
            return 0
        prev: int | None = seq.cache_salt
        bs = self.block_size
        hits: list[tuple[int, int]] = []  # (block id, chain hash) of the matching leading blocks
        for i in range((seq.num_tokens - 1) // bs):
            tokens = tuple(seq.token_slice(i * bs, (i + 1) * bs))
            h = chain_hash(prev, tokens)
            block_id = self.cached.get(h)
            if block_id is None or self.blocks[block_id].tokens != tokens:
                break
            hits.append((block_id, h))
            prev = h
        self._skipped = len(hits) * bs if len(hits) * bs < self.min_prefix_hit else 0
        if self._skipped:
            return 0
        for block_id, h in hits:
            self._ref(block_id)
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
        seq.num_computed = len(seq.block_table) * bs
        seq.num_cached_tokens = seq.num_computed
        return seq.num_computed

    def count_admission(self, seq: Sequence) -> None:
        """Count a successful admission in the prefix-cache counters (tokens looked up / found)."""
        self.prefix_queries += seq.num_tokens
        self.prefix_hits += seq.num_cached_tokens
        self.prefix_skipped += self._skipped

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register seq's blocks that became full and computed since the last call."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        n_full = min(seq.num_computed // bs, len(seq.block_table))
        for i in range(len(seq.block_hashes), n_full):
            prev = seq.block_hashes[-1] if seq.block_hashes else seq.cache_salt
            tokens = tuple(seq.token_slice(i * bs, (i + 1) * bs))
            h = chain_hash(prev, tokens)
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[i]]
            if h not in self.cached and block.hash is None:
                block.hash, block.tokens = h, tokens
                self.cached[h] = block.block_id

    # ---- allocation ----
    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow seq's block table to hold num_computed + num_new_tokens positions; False if no room.
        With a window, the blocks seq no longer needs are released first."""
        self.release_out_of_window(seq)
        need = self.blocks_for(seq.num_computed + num_new_tokens) - len(seq.block_table)
        if need > len(self.free):
            return False
        for _ in range(need):
            block_id, _ = self.free.popitem(last=False)  # least recently freed
            block = self.blocks[block_id]
            if block.hash is not None:  # evict from the prefix cache
                if self.cached.get(block.hash) == block_id:
                    del self.cached[block.hash]
                block.hash, block.tokens = None, ()
            block.ref_count = 1
            seq.block_table.append(block_id)
        return True

    def release_out_of_window(self, seq: Sequence) -> int:
        """Release seq's leading blocks that no future query sees; returns how many were released now.

        Future queries sit at positions >= num_computed and see keys > position - window, so keys below
        num_computed - window + 1 are dead, and block i with (i + 1) * block_size <= that bound too. The
        table keeps the released ids so that index i still maps positions i * block_size...; free_seq skips
        them. No attention path uses their contents: the reference, decode and varlen paths start at the
        first visible key's block, and a tile-aligned kernel (the batch-invariant one) that loads one
        gives its keys -inf scores (finite K/V times weight 0). They are already registered in the prefix
        cache (cache_full_blocks ran when they were computed)."""
        if self.window <= 0:
            return 0
        dead = max(0, seq.num_computed - self.window + 1) // self.block_size
        dead = min(dead, len(seq.block_table))
        done = self.released.get(seq.seq_id, 0)
        for block_id in seq.block_table[done:dead]:
            self._unref(block_id, seq)
        if dead > done:
            self.released[seq.seq_id] = dead
        return max(0, dead - done)

    def held_blocks(self, seq: Sequence) -> list[int]:
        """The entries of seq's block table it holds a reference on (all but the released ones)."""
        return seq.block_table[self.released.get(seq.seq_id, 0):]

    def free_seq(self, seq: Sequence) -> None:
        """Release every block of seq (last block first, so a prefix outlives its tail in the LRU)."""
        for block_id in reversed(self.held_blocks(seq)):
            self._unref(block_id, seq)
        self.released.pop(seq.seq_id, None)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed = 0

    def _unref(self, block_id: int, seq: Sequence) -> None:
        block = self.blocks[block_id]
        if block.ref_count <= 0:
            raise AssertionError(f"double free of block {block_id} by {seq!r}")
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free[block_id] = None  # cached: most recently freed, evicted last
            if block.hash is None:
                self.free.move_to_end(block_id, last=False)  # uncached: reuse first

    def _ref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1

    # ---- checks ----
    def check_integrity(self, live: Iterable[Sequence]) -> None:
        """Raise AssertionError unless ref counts equal the block tables of `live` and no block leaked."""
        counts = [0] * self.num_blocks
        for seq in live:
            assert seq.num_computed <= len(seq.block_table) * self.block_size, seq
            held = self.held_blocks(seq)
            assert len(set(held)) == len(held), f"block twice in {seq!r}"
            n_released = len(seq.block_table) - len(held)
            if n_released:  # released only what no query of seq can see any more
                assert n_released * self.block_size <= seq.num_computed - self.window + 1, seq
            for block_id in held:
                counts[block_id] += 1
        for block in self.blocks:
            assert block.ref_count == counts[block.block_id], (
                f"block {block.block_id}: ref_count {block.ref_count}, held by {counts[block.block_id]}"
            )
            assert (block.ref_count == 0) == (block.block_id in self.free), f"free list: {block.block_id}"
        for h, block_id in self.cached.items():
            assert self.blocks[block_id].hash == h, f"cache entry for block {block_id} is stale"
        assert len(self.free) + sum(1 for c in counts if c) == self.num_blocks, "leaked blocks"
