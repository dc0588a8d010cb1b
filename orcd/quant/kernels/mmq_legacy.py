"""Decode batches over raw Q5_0 and Q8_0 blocks on the tensor cores, in CUDA C (cuda/mmq_legacy_w16.cu).

llama.cpp writes these "legacy" 32-input types where a K-quant's 256-input super-blocks do not divide
the rows: the 72B's ffn_down (29,568 inputs: Q5_0 and Q8_0 in alternate layers, 16.9 of the 45.2 GB a
token reads), gpt-oss's attention and head (Q8_0), the 0.5B's 896-wide products. Before this kernel a
decode batch of 9..64 rows ran them as a dequantize to bf16 plus cuBLAS (Q5_0: ~4.7 bytes moved per
weight of 0.69) or batched_linear (Q8_0).

y[M, N] = x[M, K] @ W[N, K].T for M = 1..64 rows of bf16 or fp16 x, W read once from memory for all rows
in GGUF's own blocks: each block's integers (exact in x's type) go from registers into mma.m16n8k16, and
the block's scale multiplies its fp32 sums (no weight is rounded: the bf16 rounding of d * q put one
tiny gemma3's greedy token off the dequantized model's in tests/gpu/test_fused_gemma3.py); sums in a
fixed order (deterministic; not batch-invariant). The pieces it shares with the
Q4_K / Q6_K kernels (NVRTC through torch, the fragments, the warps' reduction) are mmq_cuda.py's.
"""

from __future__ import annotations

import functools

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.mmq_cuda import OUT_KIND, _k_ranges, available, bias_arg, check_launch, kernel_source
from orcd.quant.kernels.split_k import partials, reduce_partials

MAX_ROWS = 64  # 8 token tiles of 8
KERNELS = {Q.Q5_0: ("mmq_q5_0_w16", 6, 22), Q.Q8_0: ("mmq_q8_0_w16", 8, 34)}  # type -> (name, QTYPE, bytes)
LONG_K = 8192  # inputs past which a row is "long": ROUTED's second figure
# type -> (the most rows fused_linear sends here, the most for rows longer than LONG_K), past GEMV_MAX_N
# rows
# (down_rows sends its 5..8-row Q5_0 downs here too where this kernel runs). H200
# (bench/results/mmq_legacy_s26/): Q5_0 wins everywhere it was timed (the 72B's down at 16 / 32 / 64 rows
# 145.6 / 188.5 / 224.2 us against 340.1 / 342.2 / 347.2 dequantize + cuBLAS); Q8_0 against batched_linear
# wins at 16 rows (gpt-oss's attention 48.5 against 51.9 us a layer) and on the 72B's down (64 rows: 238.7
# against 439.7), loses on gpt-oss's attention at 32 and 64 rows (54.7 / 69.5 against 53.3 / 57.6 us a
# layer, with its best launches) and on a TP=4 rank's down at 64 (74.4 against 64.7, 7,392 inputs): past
# 16 rows Q8_0 comes here for long rows only (gpt-oss's head, 201,088 x 2,880, untimed, keeps
# batched_linear there). Measured with the kernel rounding d to x's type (before c36d8c6).
ROUTED = {Q.Q5_0: (64, 64), Q.Q8_0: (16, 64)}
LX_STRIDE = 272  # cuda/mmq_legacy_w16.cu's: 16-bit values per token row of WIDE's staged x


def legacy_source(qtype: Q | int, nw: int, mt: int, tt: int, out_kind: int, has_bias: int, u: int = 2,
                  wide: bool = False) -> str:
    """The CUDA-C text NVRTC compiles for one type and configuration (tests/kernels_compile too)."""
    name, code, _ = KERNELS[Q(int(qtype))]
    head = f"#define QTYPE {code}\n#define KNAME {name}\n#define U {u}\n"
    return head + kernel_source("mmq_legacy_w16", nw, mt, tt, out_kind, has_bias, wide)


def wide_smem(tt: int) -> int:
    """Bytes of dynamic shared memory a WIDE launch of TT token tiles takes: two stages of x's 8 * TT
    token rows of LX_STRIDE 16-bit values (68 KiB at TT 8)."""
    return 2 * 8 * tt * LX_STRIDE * 2


@functools.cache
def _kernel(qtype: Q, nw: int, mt: int, tt: int, out_kind: int, has_bias: int, u: int, wide: bool,
            device_index: int):
    source = legacy_source(qtype, nw, mt, tt, out_kind, has_bias, u, wide)
    with torch.cuda.device(device_index):
        kernel = torch.cuda._compile_kernel(source, KERNELS[qtype][0])
        if wide:
            kernel.set_shared_memory_config(wide_smem(tt))  # past 48 KiB the driver must be told
    return kernel


def default_launch(rows: int, out_features: int, in_features: int) -> tuple[int, int, int, int]:
    """(NW warps per block, MT 16-row tiles per warp, U blocks a turn, KS K ranges; KS 0: the warps of a
    block split K, each block reading all of x from L2; else WIDE). H200, the sweep of bench/results/
    mmq_legacy_s26/ (72B downs at one GPU and a TP=4 rank, gpt-oss's attention; 16, 32, 64 rows): long
    rows at <= 16 rows (4, 1, 4, 8) (Q5_0 145.6 us against 161.6 at (8, 1, 4, 0)); past 16 rows WIDE for
    products of >= 2^25 weights (32 rows: 188.5 against 230.4), (4, 2, 8, 4) past 32 (64 rows: 224.2
    against 370.3)."""
    if rows <= 16:
        return (4, 1, 4, 8) if in_features > LONG_K else (8, 1, 4, 0)
    if out_features * in_features < 1 << 25:
        return 8, 1, 4, 0
    return (8, 1, 4, 4) if rows <= 32 else (4, 2, 8, 4)


def mmq_legacy_routed(qtype: Q | int, x: torch.Tensor, raw: torch.Tensor, out_features: int,
                      in_features: int) -> bool:
    """Whether fused_linear sends this decode batch here: ROUTED's types and rows, 16-bit x, a device
    where the kernels compile (mmq_cuda.available)."""
    most, most_long = ROUTED.get(int(qtype), (0, 0))
    if in_features > LONG_K:
        most = most_long
    return x.shape[0] <= most and x.dtype in OUT_KIND and raw.data_ptr() % 2 == 0 and available(x.device)


def mmq_legacy_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                      qtype: Q | int, bias: torch.Tensor | None = None,
                      launch: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, in] (bf16/fp16 on CUDA, M <= MAX_ROWS), raw uint8 [out, row_bytes] of Q5_0 or Q8_0 blocks
    -> [M, out] in x.dtype (+ bias [out]). launch: (NW, MT, U, KS) instead of default_launch's."""
    if int(qtype) not in KERNELS:
        raise ValueError(f"mmq_legacy_linear: Q5_0 or Q8_0, got type {int(qtype)}")
    qt = Q(int(qtype))
    m, k = x.shape
    if k != in_features or k % 32 or not 1 <= m <= MAX_ROWS:
        raise ValueError(f"mmq_legacy_linear: x [1..{MAX_ROWS}, {in_features}] with in % 32 == 0, got "
                         f"{tuple(x.shape)}")
    if x.dtype not in OUT_KIND:
        raise ValueError(f"mmq_legacy_linear: x must be bf16 or fp16, got {x.dtype}")
    nblk = k // 32
    raw = raw.contiguous()
    if raw.dtype != torch.uint8 or raw.numel() != out_features * nblk * KERNELS[qt][2] or raw.data_ptr() % 2:
        raise ValueError(f"raw must be uint8 [{out_features}, {nblk * KERNELS[qt][2]}], 2-byte aligned")
    tt = -(-m // 8)
    nw, mt, u, ks = launch or default_launch(m, out_features, in_features)
    check_launch(nw, mt, tt, wide=ks > 0)
    if u not in (1, 2, 4, 8):
        raise ValueError(f"mmq_legacy launch: U (blocks a turn) 1, 2, 4 or 8, got {u}")
    x = x.contiguous()
    if x.data_ptr() % 16:  # 16-byte x pieces (WIDE's copies; rows are 64-byte multiples)
        x = x.clone()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    b, has_bias = bias_arg(bias, x, y)
    kern = _kernel(qt, nw, mt, tt, OUT_KIND[x.dtype], has_bias, u, ks > 0, x.device.index or 0)
    if ks == 0:
        grid = (-(-out_features // (16 * mt)), 1, 1)
        kern(grid=grid, block=(32 * nw, 1, 1), args=[raw, x, b, y, m, out_features, nblk, 0])
        return y
    span, ks = _k_ranges(-(-nblk // 8), ks)  # ranges of whole 256-input chunks
    ws = partials(ks, y)  # fp32 [KS, M, N], None for one range (the kernel writes y, bias added)
    grid = (-(-out_features // (16 * mt * nw)), ks, 1)
    args = [raw, x, b, y if ws is None else ws, m, out_features, nblk, span]
    kern(grid=grid, block=(32 * nw, 1, 1), args=args, shared_mem=wide_smem(tt))
    reduce_partials(ws, bias, y)
    return y
