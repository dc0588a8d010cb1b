"""Launch shapes of the int8-activation Q4_K / Q6_K GEMVs (gemv_int8.py, gemv3_int8.py): groups per
pass, rows and tokens per program, warps, and where one token's K is split across programs."""

from __future__ import annotations

from types import MappingProxyType

import triton

# (G groups per pass: 64-input chunks for Q4_K, 128-input halves for Q6_K; BO rows per program; warps),
# by NT tokens per program. NT 1, H100 sweep (bench/kernels/int8_gemv.py, docs/performance.md), 7B
# shapes: Q4_K G 64 / BO 4 / 4 warps (BO 2 since session 30), Q6_K G 8 / BO 8 / 4 warps (LM head 287 us,
# down 52 us; BO 16 since session 31). "glu": the SwiGLU kernel, G 32 / BO 4 (its output then quantized
# by quantize_x: 46.7 us together) beat BO 32 with the quantization in its epilogue (62.6 us), which stays
# available (launch=(8, 32, 4)).
# NT 1 on one H200 (session 30, the engine, each entry varied alone, twice; bench/results/gemv_i8_s30/):
# Q4_K BO 2 7B 416 / 416 tok/s against BO 4's 414 / 414 (0.5B 1,218 / 1,214 against 1,213 / 1,208), kept;
# lost: glu G 16 (347) or BO 2 (342), Q4_K G 32 (406) or BO 8 (402), Q6_K G 16 (383) or BO 4 (400); glu
# G 64 415 / 414 (not kept: within noise).
# Session 31 (one H200, bench/results/gemv_i8_s31/): **Q6_K BO 16 423 / 423 / 424 / 424** against
# 415 four times (the 0.5B 1,211 / 1,212 against 1,212 / 1,215), kept; lost: Q6_K BO 32 411-412, G 4
# 401, G 16 377, 8 warps 402-412; glu BO 8 (G 16, 32, 64; 4 or 8 warps) 391-407, BO 16 384, 8 warps at
# BO 4 324-397; Q4_K 8 warps 387, G 128 402, BO 1 411-412.
# NT 2, 4, 8: the best of an H100 sweep at M = NT on the 7B shapes (bench/results/int8_gemv_7b_multi.md),
# weighted by calls per token; the largest G tried won nearly everywhere (smaller G: more passes).
I8_LAUNCH = MappingProxyType({
    1: MappingProxyType({12: (64, 2, 4), 14: (8, 16, 4), "glu": (32, 4, 4)}),
    2: MappingProxyType({12: (32, 4, 4), 14: (8, 8, 4), "glu": (32, 4, 4)}),
    4: MappingProxyType({12: (32, 4, 4), 14: (4, 8, 4), "glu": (16, 4, 4)}),
    8: MappingProxyType({12: (16, 4, 4), 14: (1, 8, 4), "glu": (8, 4, 4)}),
})
NT_MAX = 8  # tokens per program at most (NT 16 lost to 2 x NT 8 at M = 16); more rows: ceil(N / 8) programs

# K split for one token (NT 1) where K is long (the 7B's down: K 18,944) and the row blocks are few (the
# 7B's down: 896 Q4_K, 448 Q6_K programs of 4 warps for 132 SMs): splits until about this many programs,
# by type (0: never); the last split of a row block to finish adds the partials in split order
# (split_k.split_sum). The 7B at one stream, one H200 (bench/results/k_split_s29/), tok/s twice each:
# no split 398 / 399; Q6_K in 4 (1792) 413 / 413; + Q4_K in 2 413 / 413 (not kept: no gain);
# Q6_K in 8 and Q4_K in 2 411 / 411; Q6_K in 8 and Q4_K in 4 402 / 401.
I8_SPLIT_TARGET = MappingProxyType({12: 0, 14: 1792})
I8_SPLIT_MIN_K = 8192  # shorter K (q/k/v, o, the heads, the 0.5B's down): never split
I8_SPLIT_MAX = 8
# Tried and removed (session 30, one H200): the Q4_K loop that loads the next pass's weights before this
# pass's dot products (built in 757e734). The 7B engine at 1 / 2 / 4 streams, twice each: 413 / 465 / 529
# without, 407-408 / 464 / 528 with it at NT 1, 408 / 462 / 524 at NT 1, 2 and 4 (bench/results/gemv_i8_s30/).


def tokens_per_program(n: int) -> int:
    """NT for an N-row product: the power of two >= N, at most NT_MAX."""
    return min(triton.next_power_of_2(max(n, 1)), NT_MAX)


def i8_splits(qt: int, n: int, k: int, programs: int, passes: int) -> int:
    """K splits for gemv_i8's n-row product of `programs` programs, each of `passes` passes over K."""
    target = I8_SPLIT_TARGET.get(qt, 0)
    if n > 1 or k < I8_SPLIT_MIN_K or passes < 2 or programs * 2 > target:
        return 1
    return min(I8_SPLIT_MAX, passes, target // programs)


def i8_launch(key, n: int, launch: tuple | None = None) -> tuple[int, int, int, int]:
    """(G, BO, warps, NT) for N rows: launch (G, BO, warps[, NT]) if given, else the table's."""
    if launch is not None:
        return (*launch, tokens_per_program(n)) if len(launch) == 3 else tuple(launch)
    nt = tokens_per_program(n)
    return (*I8_LAUNCH[nt][key], nt)
