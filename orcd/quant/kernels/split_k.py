"""Split-K, host side, for the products that split K when their output tiles are too few to fill the GPU.

batched_linear.py and mmq.py: a program owns [BN weight rows x BM rows of x]; where those tiles are fewer
than `target` programs, K is cut into ranges of whole K steps, each range's program writes an fp32
partial [splits, M, N], and one reduce kernel (`_reduce_kernel`, also invariant_linear's and
batched_fused's) adds the partials in split order (+ bias, + the residual y held), so the result does
not depend on timing.
fused_linear.py's GEMV: the last program of a row block to arrive sums the partials (split_reduce in
the kernel); split_counters holds the int32 arrival counters it counts with.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BM_MAX = 64  # rows per program; more rows: more programs along M (each reads the weights again)
TARGET_PROGRAMS = 264  # 2 per SM on an H100: split K until about this many programs run
REDUCE_BLOCK = 1024  # outputs per program of the reduce


def row_tile(m: int) -> int:
    """BM for m rows of x: the next power of two >= m, at least 16 (tl.dot), at most BM_MAX."""
    return min(BM_MAX, max(16, triton.next_power_of_2(m)))


def steps_per_split(steps: int, m: int, n: int, bm: int, bn: int, target: int = TARGET_PROGRAMS) -> int:
    """K steps per split of an [m, K] x [n, K].T product of `steps` K steps on [BN, BM] tiles: enough
    splits (at most one per step) that the tiles times the splits reach about `target` programs."""
    tiles = triton.cdiv(n, bn) * triton.cdiv(m, bm)
    splits = min(steps, max(1, triton.cdiv(target, tiles)))
    return triton.cdiv(steps, splits)


def partials(splits: int, y: torch.Tensor) -> torch.Tensor | None:
    """fp32 [splits, M, N] for the ranges' partial sums of y [M, N]; None for one range (it writes y)."""
    if splits <= 1:
        return None
    return torch.empty((splits, *y.shape), dtype=torch.float32, device=y.device)


@triton.jit
def _reduce_kernel(ws_ptr, b_ptr, y_ptr, M, N, stride_ym, SPLITS: tl.constexpr, BLOCK: tl.constexpr,
                   HAS_BIAS: tl.constexpr, RES: tl.constexpr):
    # y[m, n] = (((partial_0 + partial_1) + ...) + bias) (+ y[m, n]): splits added in order, the same
    # for every M
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITS):
        acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    n = offs % N
    if HAS_BIAS:
        acc += tl.load(b_ptr + n, mask=mask, other=0.0).to(tl.float32)
    ptrs = y_ptr + (offs // N).to(tl.int64) * stride_ym + n
    if RES:
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def reduce_partials(ws: torch.Tensor | None, bias: torch.Tensor | None, y: torch.Tensor,
                    residual: bool = False) -> None:
    """y [M, N] = ws [splits, M, N] summed in split order (+ bias [N]) (+ y itself, residual=True);
    nothing when ws is None."""
    if ws is None:
        return
    splits, m, n = ws.shape
    _reduce_kernel[(triton.cdiv(m * n, REDUCE_BLOCK),)](
        ws, bias, y, m, n, y.stride(0), SPLITS=splits, BLOCK=REDUCE_BLOCK, HAS_BIAS=bias is not None,
        RES=residual, num_warps=4)


@triton.jit
def split_sum(part, ws, stride_s, mask, cnt, s, S: tl.constexpr):
    """In-kernel split-K (the GEMVs): split s's program stores its partial sum `part` (any shape) at
    ws + s * stride_s (ws: pointers shaped like part, split 0's slots) and counts its arrival on the
    int32 counter cnt; the last of the S programs to arrive sums the S partials in split order, so the
    result does not depend on arrival order, and resets the counter. Returns (that sum, whether this
    program is the last one)."""
    tl.store(ws + s * stride_s, part, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(cnt, 1, sem="acq_rel")
    total = tl.zeros_like(part)
    if arrived == S - 1:
        for j in tl.static_range(S):
            total += tl.load(ws + j * stride_s, mask=mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(cnt, 0, sem="relaxed")
    return total, arrived == S - 1


_COUNTERS: dict[torch.device, torch.Tensor] = {}


def split_counters(device: torch.device, size: int) -> torch.Tensor | None:
    """Zeroed int32 arrival counters for the GEMV's split-K (each kernel resets the ones it used), made
    outside any CUDA-graph capture; None while capturing before they exist."""
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < size:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return None
        buf = _COUNTERS[device] = torch.zeros(max(size, 1 << 16), dtype=torch.int32, device=device)
    return buf
