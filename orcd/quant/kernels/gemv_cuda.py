"""One token's Q4_K product with int8 x, in CUDA C (cuda/gemv_q4k_i8.cu): the same inputs and result as
gemv_int8.gemv_i8 at one row (x from xquant.quantize_x, + bias, + the residual in place), written for the
memory system: each lane loads whole 16-byte pieces of the blocks (Triton reads them as 4-byte words) and
the next super-blocks' weights are in flight while this one's dot products run.

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
from orcd.quant.kernels.mmq_cuda import OUT_KIND, _source, available, bias_arg

KERNEL = "gemv_q4k_i8"
BLOCK_BYTES = 144
# (NW warps splitting K, R rows per block): the sweep's best at the 7B's down (bench/kernels/gemv_cuda.py)
DEFAULT_LAUNCH = (4, 2)
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


class _Attr(ctypes.Structure):  # CUlaunchAttribute: id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint)]


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
    lib = torch.cuda._utils._get_gpu_runtime_library()
    rc = lib.cuLaunchKernelEx(ctypes.byref(config), kernel.func, params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {rc}")


def kernel_source(nw: int, r: int, out_kind: int, has_bias: int, res: bool, pdl: bool) -> str:
    """The CUDA-C text NVRTC compiles for one configuration (tests/kernels_compile compiles the same)."""
    defines = f"#define NW {nw}\n#define R {r}\n#define OUT_KIND {out_kind}\n#define HAS_BIAS {has_bias}\n"
    defines += f"#define RES {int(res)}\n#define PDL {int(pdl)}\n"
    return defines + _source("scalars.cuh") + _source(KERNEL + ".cu")


@functools.cache
def _kernel(nw: int, r: int, out_kind: int, has_bias: int, res: bool, pdl: bool, device_index: int):
    with torch.cuda.device(device_index):
        return torch.cuda._compile_kernel(kernel_source(nw, r, out_kind, has_bias, res, pdl), KERNEL)


def routed(x: torch.Tensor, raw: torch.Tensor, in_features: int) -> bool:
    """Whether gemv_q4k_i8 takes this one-token product: x (quantize_x's words) on a device where the
    kernel compiles, K a whole number of super-blocks, 16-byte aligned weight rows."""
    return (x.shape[0] == 1 and in_features % 256 == 0 and raw.data_ptr() % 16 == 0
            and x.data_ptr() % 16 == 0 and available(x.device))


def gemv_q4k_i8(xq: torch.Tensor, xs: torch.Tensor, raw: torch.Tensor, out_features: int, in_features: int,
                bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                dtype: torch.dtype = torch.bfloat16,
                launch_shape: tuple[int, int] | None = None) -> torch.Tensor:
    """y [1, out] = x @ W.T for one token: xq int32 [1, K / 4], xs float32 [1, K / 32, 4] (quantize_x),
    raw uint8 [out, K / 256 * 144] Q4_K; + bias [out]; residual [1, out] (bf16 / fp16): added into it in
    place and returned. launch_shape: (NW, R) instead of DEFAULT_LAUNCH."""
    if xq.shape != (1, in_features // 4) or in_features % 256:
        raise ValueError(f"gemv_q4k_i8: one token of K % 256 == 0 inputs, got xq {tuple(xq.shape)}")
    if raw.numel() != out_features * in_features // 256 * BLOCK_BYTES or raw.data_ptr() % 16:
        row = in_features // 256 * BLOCK_BYTES
        raise ValueError(f"raw must be uint8 [{out_features}, {row}], 16-byte aligned")
    y = residual if residual is not None else torch.empty((1, out_features), dtype=dtype, device=xq.device)
    if y.dtype not in OUT_KIND or not y.is_contiguous():
        raise ValueError(f"gemv_q4k_i8: a contiguous bf16 / fp16 output, got {y.dtype}")
    nw, r = launch_shape or DEFAULT_LAUNCH
    b, has_bias = bias_arg(bias, y, y)
    pdl = pdl_enabled(xq.device)
    kern = _kernel(nw, r, OUT_KIND[y.dtype], has_bias, residual is not None, pdl, xq.device.index or 0)
    grid = (-(-out_features // r), 1, 1)
    launch(kern, grid, (32 * nw, 1, 1), [raw, xq, xs, b, y, out_features, in_features // 256], pdl)
    return y
