"""One token's Q4_K and split Q6_K products with int8 x in CUDA C (cuda/gemv_q4k_i8.cu, gemv_q6k_i8.cu;
q/k/v in one launch: gemv3_i8.cu, as gemv3_int8.py): the same inputs and result as gemv_int8.gemv_i8 at
one row (x from xquant.quantize_x, + bias, + the residual in place), written for the memory system: each
lane loads whole 16-byte pieces of the blocks (Triton reads them as 4-byte words) and the next
super-blocks' weights are in flight while this one's dot products run.

Compiled at first use by NVRTC through torch (as mmq_cuda.py), once per launch configuration and
process. Launched with programmatic dependent launch where the GEMVs use it (fused_linear.pdl_enabled):
cuLaunchKernelEx through ctypes with the stream-serialization attribute, so the weights' first loads
overlap the previous kernel as the Triton GEMVs' do (torch's own launcher has no attributes).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from orcd.quant.kernels.fused_linear import pdl_enabled
from orcd.quant.kernels.layout import q6k_tail, row_bytes
from orcd.quant.kernels.mmq_cuda import OUT_KIND, _source, available, bias_arg

KERNELS = {(12, False): "gemv_q4k_i8", (14, True): "gemv_q6k_i8"}  # (type, split layout) -> cuda/NAME.cu
GEMV3 = "gemv3_i8"  # q, k, v in one launch (cuda/gemv3_i8.cu, after both kernels' sources)
# (NW warps splitting K, R rows per block) by output rows: two rows a block; 2 warps where the rows alone
# make >= 1024 blocks, else 4 (more of K in flight for few rows). One H200, µs (bench/results/s36/
# gemv_cuda; Triton gemv_i8 in brackets): 7B o Q4_K 5.5 at 2 x 2, 5.9 at 4 x 2 (6.9); 7B down Q4_K 17.6 /
# 17.5 (21.0), Q6_K 20.2 / 21.2 (25.9); 0.5B down (896 rows) Q4_K 3.8 / 3.2 (3.5), Q6_K 3.9 / 3.2 (7.6).
WIDE_ROWS = 2048
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


def default_launch(out_features: int) -> tuple[int, int]:
    """(NW, R) for a product of `out_features` rows (for q/k/v: the three's rows together)."""
    return (2, 2) if out_features >= WIDE_ROWS else (4, 2)


class _Attr(ctypes.Structure):  # CUlaunchAttribute: id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint)]


@functools.cache
def _launch_kernel_ex():
    """The driver's cuLaunchKernelEx, looked up once (torch's helper opens libcuda anew each call)."""
    return torch.cuda._utils._get_gpu_runtime_library().cuLaunchKernelEx


def launch(kernel, grid: tuple[int, int, int], block: tuple[int, int, int], args: list, pdl: bool) -> None:
    """Launch torch's compiled `kernel` on the current stream; pdl: may start before the previous kernel
    ends (the kernel waits with griddepcontrol.wait before reading that kernel's output)."""
    if not pdl:
        kernel(grid=grid, block=block, args=args)
        return
    keep = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int(a) for a in args]
    params = (ctypes.c_void_p * len(keep))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in keep])
    attr = _Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    config = _Config(grid=(ctypes.c_uint * 3)(*grid), block=(ctypes.c_uint * 3)(*block), shared=0,
                     stream=ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                     attrs=ctypes.pointer(attr), num_attrs=1)
    rc = _launch_kernel_ex()(ctypes.byref(config), kernel.func, params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {rc}")


def kernel_source(name: str, nw: int, r: int, out_kind: int, has_bias: int, res: bool, pdl: bool,
                  types: tuple[int, ...] = ()) -> str:
    """The CUDA-C text NVRTC compiles for kernel `name` (a KERNELS value or GEMV3) at one configuration
    (tests/kernels_compile compiles the same). types: GEMV3's three matrices' types (QA, QB, QC)."""
    defines = f"#define NW {nw}\n#define R {r}\n#define OUT_KIND {out_kind}\n#define HAS_BIAS {has_bias}\n"
    defines += f"#define RES {int(res)}\n#define PDL {int(pdl)}\n"
    defines += "".join(f"#define Q{'ABC'[j]} {t}\n" for j, t in enumerate(types))
    kernels = [*KERNELS.values(), GEMV3] if name == GEMV3 else [name]
    parts = ["scalars.cuh", "gemv.cuh", *(k + ".cu" for k in kernels)]
    return defines + "".join(_source(part) for part in parts)


@functools.cache
def _kernel(name: str, nw: int, r: int, out_kind: int, has_bias: int, res: bool, pdl: bool,
            device_index: int, types: tuple[int, ...] = ()):
    with torch.cuda.device(device_index):
        source = kernel_source(name, nw, r, out_kind, has_bias, res, pdl, types)
        return torch.cuda._compile_kernel(source, name)


def routed(x: torch.Tensor, raw: torch.Tensor, in_features: int, qtype: int, split: bool) -> bool:
    """Whether gemv_cuda_i8 takes this one-token product: Q4_K on GGUF's blocks or Q6_K in the split
    layout, x (quantize_x's words) on a device where the kernels compile, K a whole number of
    super-blocks, 16-byte aligned weights."""
    if (int(qtype), bool(split)) not in KERNELS or x.shape[0] != 1 or in_features % 256:
        return False
    return raw.data_ptr() % 16 == 0 and x.data_ptr() % 16 == 0 and available(x.device)


def _check_x(who: str, xq: torch.Tensor, in_features: int) -> None:
    if xq.shape != (1, in_features // 4) or in_features % 256:
        raise ValueError(f"{who}: one token of K % 256 == 0 inputs, got xq {tuple(xq.shape)}")


def _check_weight(who: str, raw: torch.Tensor, out_features: int, in_features: int, qt: int,
                  split: bool) -> None:
    """ValueError unless raw is a (type, layout) of KERNELS, [out, row_bytes], 16-byte aligned."""
    if (qt, bool(split)) not in KERNELS:
        raise ValueError(f"{who}: Q4_K on GGUF's blocks or split Q6_K, got type {qt} split={split}")
    row = row_bytes(qt, in_features)
    if raw.numel() != out_features * row or raw.data_ptr() % 16:
        raise ValueError(f"raw must be uint8 [{out_features}, {row}], 16-byte aligned")


def gemv_cuda_i8(xq: torch.Tensor, xs: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                 qtype: int = 12, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.bfloat16, split: bool = False,
                 launch_shape: tuple[int, int] | None = None) -> torch.Tensor:
    """y [1, out] = x @ W.T for one token: xq int32 [1, K / 4], xs float32 [1, K / 32, 4] (quantize_x),
    raw uint8 [out, row_bytes] Q4_K (12; GGUF's blocks) or Q6_K (14; split: layout.split_q6_k's layout);
    + bias [out]; residual [1, out] (bf16 / fp16): added into it in place and returned. launch_shape:
    (NW, R) instead of default_launch's."""
    qt = int(qtype)
    _check_weight("gemv_cuda_i8", raw, out_features, in_features, qt, split)
    _check_x("gemv_cuda_i8", xq, in_features)
    y = residual if residual is not None else torch.empty((1, out_features), dtype=dtype, device=xq.device)
    if y.dtype not in OUT_KIND or not y.is_contiguous():
        raise ValueError(f"gemv_cuda_i8: a contiguous bf16 / fp16 output, got {y.dtype}")
    nw, r = launch_shape or default_launch(out_features)
    b, has_bias = bias_arg(bias, y, y)
    pdl = pdl_enabled(xq.device)
    name = KERNELS[(qt, bool(split))]
    kern = _kernel(name, nw, r, OUT_KIND[y.dtype], has_bias, residual is not None, pdl, xq.device.index or 0)
    weights = [raw] if qt == 12 else [raw, q6k_tail(raw)]  # Q6_K: the 208-byte blocks, then the d's
    args = [*weights, xq, xs, b, y, out_features, in_features // 256]
    launch(kern, (-(-out_features // r), 1, 1), (32 * nw, 1, 1), args, pdl)
    return y


def gemv3_routed(xq: torch.Tensor, weights: list, in_features: int, split: tuple) -> bool:
    """Whether gemv3_cuda_i8 takes q/k/v: each (raw, out, qtype, bias) as routed() takes it alone."""
    return all(routed(xq, raw, in_features, qt, s) for (raw, _, qt, _), s in zip(weights, split, strict=True))


def gemv3_cuda_i8(xq: torch.Tensor, xs: torch.Tensor, weights: list, in_features: int, dtype: torch.dtype,
                  split: tuple = (False, False, False),
                  launch_shape: tuple[int, int] | None = None) -> list[torch.Tensor]:
    """gemv3_int8.gemv3_i8 for one token: weights 3 x (raw, out_i, qtype_i, bias_i: all or none), each Q4_K
    on GGUF's blocks or Q6_K in the split layout (split[i]) -> [y_i [1, out_i]] in dtype. launch_shape:
    (NW, R) instead of default_launch's for all three's rows."""
    if len(weights) != 3 or len({b is None for *_, b in weights}) != 1:
        raise ValueError("gemv3_cuda_i8: three weights, biases all present or all absent")
    _check_x("gemv3_cuda_i8", xq, in_features)
    args, types, ys = [], [], []
    for (raw, out_f, qtype, bias), sp in zip(weights, split, strict=True):
        qt = int(qtype)
        _check_weight("gemv3_cuda_i8", raw, out_f, in_features, qt, sp)
        y = torch.empty((1, out_f), dtype=dtype, device=xq.device)
        b, has_bias = bias_arg(bias, y, y)
        args += [raw, q6k_tail(raw) if qt == 14 else raw, b, y, out_f]
        types.append(qt)
        ys.append(y)
    nw, r = launch_shape or default_launch(sum(w[1] for w in weights))
    pdl = pdl_enabled(xq.device)
    kern = _kernel(GEMV3, nw, r, OUT_KIND[dtype], has_bias, False, pdl, xq.device.index or 0, tuple(types))
    blocks = sum(-(-w[1] // r) for w in weights)
    launch(kern, (blocks, 1, 1), (32 * nw, 1, 1), [xq, xs, in_features // 256, *args], pdl)
    return ys

