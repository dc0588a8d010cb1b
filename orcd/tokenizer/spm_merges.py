"""Every split of a SentencePiece token into two tokens, found with array operations.

llama.cpp's SentencePiece tokenizer merges the adjacent pair whose concatenation is a token with the
highest score (leftmost on ties); a `tokenizers` BPE model reproduces that given every split of every token
into two tokens (build.spm_merges ranks them). Gemma's 262k tokens have ~1.2M candidate splits, ~515k of
them into two tokens: cut and looked up one by one in Python that took ~3 s of every load. Here all tokens
get polynomial prefix hashes (mod 2**64) at once, every prefix/suffix hash is looked up among the whole
tokens' hashes by binary search, and every hit is then compared character by character, so a hash
collision never adds a wrong split. Two tokens with the same hash, or tokens longer than _MAX_LEN chars,
take the exact slow path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_BASE = np.uint64(0x100000001B3)
_ONE = np.uint64(1)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: Fibonacci hashing
_MAX_LEN = 128  # longer tokens (none in real vocabularies) are split the slow way
_EMPTY = np.zeros(0, dtype=np.int64)
_CHUNK = 32768  # candidates checked at once


def split_pairs(tokens: Sequence[str], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, l, r) id arrays: tokens[l] + tokens[r] == tokens[m], for every split of every token."""
    codes, starts, lens = _codes(tokens)
    short = np.flatnonzero((lens >= 1) & (lens <= _MAX_LEN))
    rows = short[np.argsort(-lens[short], kind="stable")]  # longest first: those longer than k are a prefix
    found = _hashed_pairs(codes, starts, lens, rows) if len(rows) else (_EMPTY, _EMPTY, _EMPTY)
    if found is None:  # two tokens share a hash: all the slow way
        return _slow_pairs(tokens, index, range(len(tokens)))
    m, l, r = found
    ok = _same_text(codes, starts, lens, m, l, r)
    m, l, r = m[ok], l[ok], r[ok]
    long = np.flatnonzero(lens > _MAX_LEN)
    if len(long):
        lm, ll, lr = _slow_pairs(tokens, index, long.tolist())
        m, l, r = np.concatenate([m, lm]), np.concatenate([l, ll]), np.concatenate([r, lr])
    return m, l, r


def _codes(tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(code points of all tokens concatenated, each token's start in it, each token's length)."""
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    codes = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    starts = np.zeros(len(tokens), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return codes.astype(np.uint64), starts, lens


def _hashed_pairs(codes: np.ndarray, starts: np.ndarray, lens: np.ndarray,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Candidate splits of the tokens `rows` (longest first) by hash; None if two tokens share a hash.
    Prefix hashes are kept one column at a time (a whole matrix is ~70 MB for Gemma's vocabulary)."""
    rlen = lens[rows]
    width = int(rlen[0])
    longer = [int(np.count_nonzero(rlen > k)) for k in range(width + 1)]  # rows longer than k: a prefix
    first = starts[rows]
    with np.errstate(over="ignore"):
        whole = np.zeros(len(rows), dtype=np.uint64)
        for k in range(width):
            _extend(whole, codes, first, k, longer[k])
        powers = np.ones(width + 1, dtype=np.uint64)  # _BASE**0 .. _BASE**width
        np.cumprod(np.full(width, _BASE, dtype=np.uint64), out=powers[1:])
        keys = whole * _MIX  # a bijection whose top bits depend on all bits: the table's buckets
        order = np.argsort(keys)
        table = _Table(keys[order])
        if table.has_duplicates():
            return None
        ms, ls, rs = [], [], []
        prefix = np.zeros(len(rows), dtype=np.uint64)  # hash of each row's first k chars
        for k in range(1, width):
            c = longer[k]
            _extend(prefix, codes, first, k - 1, longer[k - 1])
            left, hit = table.find(prefix[:c] * _MIX)
            cand = np.flatnonzero(hit)
            right, hit = table.find((whole[cand] - prefix[cand] * powers[rlen[cand] - k]) * _MIX)
            ms.append(cand[hit])
            ls.append(left[cand[hit]])
            rs.append(right[hit])
    if not ms:
        return _EMPTY, _EMPTY, _EMPTY
    return rows[np.concatenate(ms)], rows[order[np.concatenate(ls)]], rows[order[np.concatenate(rs)]]


def _extend(hashes: np.ndarray, codes: np.ndarray, first: np.ndarray, k: int, c: int) -> None:
    """Append char k to the hashes of the first c rows (those longer than k)."""
    hashes[:c] *= _BASE
    hashes[:c] += codes[first[:c] + k]
    hashes[:c] += _ONE


class _Table:
    """Sorted keys, found by their top bits (a bucket index) then a short scan: two memory reads per
    query where a binary search over 262k entries makes ~18."""

    def __init__(self, hashes: np.ndarray) -> None:
        self.hashes = hashes
        self.bits = max(1, min(24, int(len(hashes)).bit_length() + 2))
        self.shift = np.uint64(64 - self.bits)
        counts = np.bincount((hashes >> self.shift).astype(np.int64), minlength=1 << self.bits)
        self.bucket = np.zeros((1 << self.bits) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.bucket[1:])

    def has_duplicates(self) -> bool:
        return bool(np.any(self.hashes[1:] == self.hashes[:-1]))

    def find(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in the table, whether it is there) for each query."""
        b = (queries >> self.shift).astype(np.int64)
        pos, end = self.bucket[b], self.bucket[b + 1]
        hit = np.zeros(len(queries), dtype=bool)
        todo = np.flatnonzero(pos < end)
        while len(todo):
            p = pos[todo]
            same = self.hashes[p] == queries[todo]
            hit[todo[same]] = True
            todo = todo[~same]
            pos[todo] += 1
            todo = todo[pos[todo] < end[todo]]
        return pos, hit


def _same_text(codes: np.ndarray, starts: np.ndarray, lens: np.ndarray, m: np.ndarray, l: np.ndarray,
               r: np.ndarray) -> np.ndarray:
    """Per candidate: is tokens[l] + tokens[r] == tokens[m], compared character by character (in chunks:
    small temporaries are reused, big ones cost page faults)."""
    ok = np.ones(len(m), dtype=bool)
    for i in range(0, len(m), _CHUNK):
        ok[i:i + _CHUNK] = _same_text_part(codes, starts, lens, m[i:i + _CHUNK], l[i:i + _CHUNK],
                                           r[i:i + _CHUNK])
    return ok


def _same_text_part(codes: np.ndarray, starts: np.ndarray, lens: np.ndarray, m: np.ndarray, l: np.ndarray,
                    r: np.ndarray) -> np.ndarray:
    ok = lens[l] + lens[r] == lens[m]
    size = np.where(ok, lens[m], 0)
    offs = np.zeros(len(m), dtype=np.int64)
    np.cumsum(size[:-1], out=offs[1:])
    j = np.arange(int(size.sum()), dtype=np.int64) - np.repeat(offs, size)  # char index within the token
    in_left = j < np.repeat(lens[l], size)
    mine = np.repeat(starts[m], size) + j
    theirs = np.where(in_left, np.repeat(starts[l], size) + j, np.repeat(starts[r] - lens[l], size) + j)
    equal = codes[mine] == codes[theirs]
    bad = np.repeat(np.arange(len(m)), size)[~equal]
    ok[bad] = False
    return ok


def _slow_pairs(tokens: Sequence[str], index: dict[str, int],
                which: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    found = [(i, index[tok[:cut]], index[tok[cut:]]) for i in which for tok in (tokens[i],)
             for cut in range(1, len(tok)) if tok[:cut] in index and tok[cut:] in index]
    if not found:
        return _EMPTY, _EMPTY, _EMPTY
    m, l, r = np.asarray(found, dtype=np.int64).T
    return m, l, r
