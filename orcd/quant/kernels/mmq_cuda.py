"""Decode batches over raw Q4_K and Q6_K blocks on the tensor cores, in CUDA C (cuda/mmq_q4k_w16.cu,
cuda/mmq_q6k_w16.cu: Q6_K in layout.split_q6_k's layout only, its 16-byte-aligned blocks).

y[M, N] = x[M, K] @ W[N, K].T for M = 1..64 rows of bf16 or fp16 x, W read once from memory for all rows
as the model holds it, dequantized to x's type in registers right where mma.m16n8k16 takes it (Marlin's
idea on GGUF's own bytes), fp32 accumulation. Triton cannot place dequantized weights in the tensor
cores' register fragments (its dot goes through shared memory), which kept mmq.py's products at 0.4-1.0
TB/s on the H100 at 8 rows. The source is compiled at first use by NVRTC through torch
(torch.cuda._compile_kernel: the libnvrtc that torch's CUDA wheels bring, no nvcc), once per launch
configuration and process (~0.3-0.9 s each on the H100). Where that is missing (CPU, compute capability
< 8.0, a torch without it) `available` says so and fused_linear keeps mmq.py.

Each weight is rounded to x's type as in mmq.py's float-w path (d*sc and dmin*m rounded first: ~3
roundings of x's type per weight, no rounding of x); sums in a fixed order (deterministic; not
batch-invariant: the invariant step keeps its own kernel). An int8 variant of the same kernel (x rounded
to int8 per 32, mma.m16n8k32, the scales applied per sub-block) was measured slower at every 7B shape at
8 and 16 rows (bench/results/mmq_cuda_s19/) and removed.

Two variants of each kernel (WIDE in the source): in one a block owns 16 * MT weight rows and its warps
split K (launch (NW, MT)); in the other (WIDE: long rows, the LM head and batches past 16 rows, see
uses_wide) each warp owns rows of its own, the block shares x through shared memory (two stages: cp.async
copies the next super-block's x while the warps multiply this one's) and blocks split K into KS ranges
whose fp32 partials split_k.py's reduce adds in order (launch (NW, MT, KS)).
"""

from __future__ import annotations

import functools
import logging
from importlib import resources

import torch
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.layout import q6k_tail, row_bytes
from orcd.quant.kernels.split_k import partials, reduce_partials

log = logging.getLogger("orcd.quant")

MAX_ROWS = 64  # 8 token tiles of 8
# Rows <= ROUTE_ROWS: the variant whose warps split K, except where uses_wide; past that each of its
# 16-row tiles re-reads all of x (H100, 7B at M = 64: gate/up 58.6 us against mmq.py's 55.7, down 97.7
# against 51.2), so only the short products keep it there.
ROUTE_ROWS = 16
# (type, split layout) that fused_linear / split_linear send here -> the most rows. H100, 7B (bench/
# results/mmq_cuda_s20/): Q6_K in the split layout at 5..16 rows took the engine from 1,578 to 2,046 tok/s
# at 8 streams, 2,861 to 3,384 at 16. H200 (bench/results/mmq_cuda_s21/): with WIDE's x copy in two
# stages Q4_K at 64 rows beats mmq.py too (gate/up 52.9 against 55.7 us, o 16.2 against 18.1; down 51.5
# against 50.7); the engine at 64 streams, session 20's route and kernels -> these: 8,537 -> 8,909 tok/s.
ROUTED = {(Q.Q4_K, False): 64, (Q.Q6_K, True): 64}
OUT_KIND = {torch.bfloat16: 0, torch.float16: 1}
KERNELS = {Q.Q4_K: "mmq_q4k_w16", Q.Q6_K: "mmq_q6k_w16"}  # type -> kernel (cuda/NAME.cu, function NAME)
SMEM_LIMIT = 48 * 1024  # static shared memory of the warps' partial sums: NW * MT * TT * 4 * 32 floats
XS_STRIDE = 288  # cuda/common.cuh's: 16-bit values per token row of WIDE's staged x


def available(device: torch.device | str) -> bool:
    """Whether this process can compile and run the kernels on `device`: CUDA, compute capability >= 8.0
    (mma.m16n8k16 on bf16), a torch whose NVRTC kernels take more than 48 KiB of shared memory, and that
    NVRTC compiling one of them (once per process and device; where it fails, a warning and False:
    fused_linear and split_linear keep their Triton kernels)."""
    return _available(str(torch.device(device)))


@functools.cache
def _available(name: str) -> bool:
    device = torch.device(name)
    if device.type != "cuda" or not torch.cuda.is_available() or not hasattr(torch.cuda, "_compile_kernel"):
        return False
    if not hasattr(torch.cuda._utils._CudaKernel, "set_shared_memory_config"):  # WIDE's > 48 KiB launches
        return False
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False
    try:  # torch.cuda._compile_kernel is torch's own (private) NVRTC wrapper: libnvrtc may be missing
        _kernel(KERNELS[Q.Q4_K], 8, 1, 1, OUT_KIND[torch.bfloat16], False, device.index or 0)
    except (RuntimeError, OSError, TypeError) as e:
        log.warning("CUDA-C decode kernels unavailable on %s (%s): the Triton kernels take their batches",
                    name, e)
        return False
    return True


def default_launch(in_features: int, rows: int, out_features: int | None = None) -> tuple[int, ...]:
    """(NW warps per block, MT 16-row tiles per warp) for K inputs and M rows: one 16 * MT-row tile of
    N per block, its warps taking K's super-blocks in turn. H100, 7B shapes at M = 8 and 16 (bench/
    results/mmq_cuda_s19/): 8 x 1, and 16 x 1 for long rows (ffn_down, K = 18944: 25.6 us against 38.6 at
    8 x 1 at M = 8); fewer warps where their partial sums would not fit in shared memory. Where
    uses_wide (out_features given): the WIDE variant's (NW, MT, KS), 4 warps of 2 tiles, K ranges for
    ~528 blocks (H100, 7B gate/up at 16-64 rows: the best or within the sweep's spread; mmq_cuda_s20),
    except at 17..32 rows (H200, mmq_cuda_s21): 1 tile per warp, long rows (down, K 18944) ~528 blocks
    (4 x 1 x 9: 38.6 us against 44.7 at 4 x 2 x 9), the others but the LM head ~1056 (gate/up 4 x 1 x
    4: 37.4 against 41.8 at 4 x 2 x 4; engine at 32 streams 5,872 -> 6,180 tok/s); and long rows past 32
    rows: 2 tiles, ~264 blocks (4 x 2 x 9: 51.5 against 79.9 at 4 x 1 x 9). Rows that are not long take at
    most 4 K ranges once their tiles number 64 or more (_wide_capped)."""
    if out_features is not None and uses_wide(rows, out_features, in_features):
        if rows > ROUTE_ROWS and in_features > 8192:
            return wide_launch(out_features, in_features, *((4, 1, 528) if rows <= 32 else (4, 2, 264)))
        if ROUTE_ROWS < rows <= 32 and out_features <= 65536:
            return _wide_capped(out_features, in_features, 4, 1, 1056)
        return _wide_capped(out_features, in_features, 4, 2, 528)
    nw = 16 if in_features > 8192 else 8
    while nw > 1 and not _fits(nw, 1, -(-rows // 8)):
        nw //= 2
    return nw, 1


def uses_wide(rows: int, out_features: int, in_features: int) -> bool:
    """Whether the WIDE variant takes this product. H100, 7B (bench/results/mmq_cuda_s20/, 9 / 32 rows):
    at 9..16 rows it won on the long rows (Q4_K down, K 18944: 31.6 us against 35.0 splitting K) and the
    LM head (198.0 against 213.4), not on gate/up (27.3 splitting K against 29.7); at 17..32 on everything
    but the short products (q/o 3584 x 3584 at 32 rows: 10.3 splitting K against 13.3; k/v). Past 32 rows
    (H200, mmq_cuda_s21) on everything but k/v (q/o at 64 rows: 16.2 against 21.3 splitting K; k/v 10.4
    against 8.7) and, H200 mmq_cuda_s22, a TP=2 rank's halves of q and o (q 1792 x 3584: 10.8 splitting K
    against 12.5; o 3584 x 1792: 11.9 against 15.0). At <= 8 rows: untimed, the K split stays."""
    if rows <= 8:
        return False
    long = in_features > 8192 or out_features > 65536
    if rows <= ROUTE_ROWS:
        return long
    if rows <= 32:
        return long or out_features > 4096 or in_features > 4096
    return out_features > 2048 and in_features > 2048


def wide_launch(out_features: int, in_features: int, nw: int, mt: int,
                target: int = 264) -> tuple[int, int, int]:
    """(NW, MT, KS) of the WIDE variant: KS K ranges of whole super-blocks, enough that the blocks of
    16 * MT * NW rows times the ranges reach about `target` (ranges no shorter than 2 super-blocks)."""
    nb = in_features // 256
    tiles = -(-out_features // (16 * mt * nw))
    return nw, mt, _k_ranges(nb, max(1, min(nb // 2, round(target / tiles))))[1]


def _wide_capped(out_features: int, in_features: int, nw: int, mt: int, target: int) -> tuple[int, int, int]:
    """wide_launch's (NW, MT, KS), with at most 4 K ranges where the row tiles alone number 64 or more
    (half an H100's or H200's SMs). H200, a TP=2 rank's gate/up 9472 x 3584 (bench/results/mmq_cuda_s22/):
    at 32 rows 4 x 1 x 4 20.8 us against 21.8 at 4 x 1 x 7 (148 tiles), at 64 rows 4 x 2 x 4 27.2 against
    30.9 at 4 x 2 x 7 (74 tiles); the 7B's own gate/up (296 and 148 tiles) took 4 already."""
    launch = wide_launch(out_features, in_features, nw, mt, target)
    tiles = -(-out_features // (16 * mt * nw))
    if tiles >= 64 and launch[2] > 4:
        return wide_launch(out_features, in_features, nw, mt, 4 * tiles)
    return launch


def _k_ranges(nb: int, ks: int) -> tuple[int, int]:
    """(super-blocks per range, ranges) for about ks ranges of nb super-blocks, none of them empty."""
    span = -(-nb // ks)
    return span, -(-nb // span)


def wide_smem(tt: int) -> int:
    """Bytes of dynamic shared memory a WIDE launch of TT token tiles takes: x's two stages of 8 * TT token
    rows of XS_STRIDE 16-bit values (72 KiB at TT 8; an H100 block may take 227 KiB)."""
    return 2 * 8 * tt * XS_STRIDE * 2


def _fits(nw: int, mt: int, tt: int) -> bool:
    return nw * mt * tt * 4 * 32 * 4 <= SMEM_LIMIT


def mmq_cuda_routed(qtype: Q | int, in_features: int, x: torch.Tensor, raw: torch.Tensor,
                    split: bool = False) -> bool:
    """Whether fused_linear (Q4_K) or q6k_split.split_linear (Q6_K, split: the split layout) sends a
    decode batch of this product here (the caller sends M <= GEMV_MAX_N rows to its GEMVs first): at most
    ROUTED's rows for the type, 16-bit x (fp32 x keeps batched_linear's exact fp32 dots), 16-byte
    aligned blocks, a device where the kernel compiles."""
    if x.shape[0] > ROUTED.get((int(qtype), split), 0) or in_features % 256:
        return False
    return x.dtype in OUT_KIND and raw.data_ptr() % 16 == 0 and available(x.device)


@functools.cache
def _source(name: str) -> str:
    return resources.files("orcd.quant.kernels").joinpath(f"cuda/{name}").read_text()


def kernel_source(name: str, nw: int, mt: int, tt: int, out_kind: int, has_bias: int,
                  wide: bool = False) -> str:
    """The CUDA-C text NVRTC compiles for kernel `name` (a KERNELS value) at one configuration: the
    defines, scalars.cuh, common.cuh, w16.cuh, then cuda/NAME.cu (tests/kernels_compile compiles the same
    text).
    has_bias: bias_arg's kind (0 none, 1 float32, 2 in x's type)."""
    defines = f"#define NW {nw}\n#define MT {mt}\n#define TT {tt}\n#define OUT_KIND {out_kind}\n"
    defines += f"#define HAS_BIAS {int(has_bias)}\n#define WIDE {int(wide)}\n"
    parts = ["scalars.cuh", "common.cuh", "w16.cuh", name + ".cu"]
    return defines + "".join(_source(p) for p in parts)


@functools.cache
def _kernel(name: str, nw: int, mt: int, tt: int, out_kind: int, has_bias: int, device_index: int,
            wide: bool = False):
    """The compiled kernel `name` of one configuration (NVRTC, then the driver's PTX compiler)."""
    source = kernel_source(name, nw, mt, tt, out_kind, has_bias, wide)
    with torch.cuda.device(device_index):
        kernel = torch.cuda._compile_kernel(source, name)
        if wide:
            kernel.set_shared_memory_config(wide_smem(tt))  # past 48 KiB the driver must be told
    return kernel


def bias_arg(bias: torch.Tensor | None, x: torch.Tensor, none: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(the bias as the kernels read it, its HAS_BIAS kind): 0 none (`none` passed in its place, never
    read); 2 a bias in x's dtype, read as it is (a model's own: no float32 copy launched each call); 1 any
    other, as a float32 copy."""
    if bias is None:
        return none, 0
    if bias.dtype == x.dtype:
        return bias.contiguous(), 2
    return bias.float().contiguous(), 1


def check_launch(nw: int, mt: int, tt: int, wide: bool = False) -> None:
    """ValueError where a configuration cannot compile (shared memory) or is not one the kernel takes."""
    if nw not in (1, 2, 4, 8, 16) or mt not in (1, 2, 4) or not 1 <= tt <= MAX_ROWS // 8:
        raise ValueError(f"mmq_cuda launch (NW {nw}, MT {mt}, TT {tt}): NW 1..16, MT 1, 2 or 4, TT 1..8")
    if not wide and not _fits(nw, mt, tt):  # WIDE's shared memory: wide_smem, 72 KiB at most
        raise ValueError(f"mmq_cuda launch (NW {nw}, MT {mt}, TT {tt}): partial sums exceed 48 KiB")


def mmq_cuda_linear(x: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                    bias: torch.Tensor | None = None, launch: tuple[int, ...] | None = None,
                    qtype: Q | int = Q.Q4_K) -> torch.Tensor:
    """x [M, in] (bf16/fp16 on CUDA, M <= MAX_ROWS), raw uint8 [out, row_bytes] of Q4_K (GGUF's blocks)
    or Q6_K (the split layout) -> [M, out] in x.dtype (+ bias [out]). launch: (NW, MT) or the WIDE
    variant's (NW, MT, KS) instead of default_launch's."""
    m, k = x.shape
    if int(qtype) not in KERNELS:
        raise ValueError(f"mmq_cuda_linear: Q4_K or Q6_K (split), got type {int(qtype)}")
    qt = Q(int(qtype))
    w_row = row_bytes(qt, in_features)
    if k != in_features or k % 256 or not 1 <= m <= MAX_ROWS:
        raise ValueError(f"mmq_cuda_linear: x [1..{MAX_ROWS}, {in_features}] with in % 256 == 0, got "
                         f"{tuple(x.shape)}")
    if x.dtype not in OUT_KIND:
        raise ValueError(f"mmq_cuda_linear: x must be bf16 or fp16, got {x.dtype}")
    raw = raw.contiguous()
    if raw.dtype != torch.uint8 or raw.numel() != out_features * w_row or raw.data_ptr() % 16:
        raise ValueError(f"raw must be uint8 [{out_features}, {w_row}], 16-byte aligned")
    tt = -(-m // 8)
    launch = launch or default_launch(in_features, m, out_features)
    nw, mt, ks = (*launch, 0) if len(launch) == 2 else launch  # ks 0: warps split K; >= 1: WIDE
    check_launch(nw, mt, tt, wide=ks > 0)
    x = x.contiguous()
    if x.data_ptr() % 16:  # rows are 16-byte aligned when the tensor is (K % 256 == 0)
        x = x.clone()
    y = torch.empty((m, out_features), dtype=x.dtype, device=x.device)
    b, has_bias = bias_arg(bias, x, y)
    kern = _kernel(KERNELS[qt], nw, mt, tt, OUT_KIND[x.dtype], has_bias, x.device.index or 0, ks > 0)
    scales = [q6k_tail(raw)] if qt == Q.Q6_K else []  # Q6_K: the d's, apart from the 208-byte blocks
    nb = k // 256
    if ks == 0:
        grid = (-(-out_features // (16 * mt)), 1, 1)
        kern(grid=grid, block=(32 * nw, 1, 1), args=[raw, *scales, x, b, y, m, out_features, nb, nb])
        return y
    span, ks = _k_ranges(nb, ks)
    ws = partials(ks, y)  # fp32 [KS, M, N], None for one range (the kernel writes y, bias added)
    grid = (-(-out_features // (16 * mt * nw)), ks, 1)
    args = [raw, *scales, x, b, y if ws is None else ws, m, out_features, nb, span]
    kern(grid=grid, block=(32 * nw, 1, 1), args=args, shared_mem=wide_smem(tt))
    reduce_partials(ws, bias, y)
    return y
