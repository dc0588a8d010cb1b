"""QuantLinear / QuantEmbedding: modules over GGUF weights, dense or kept as raw blocks on the device."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import torch
from gguf import GGMLQuantizationType
from torch import nn
from torch.nn import functional as F

from orcd.errors import GGUFError
from orcd.gguf.reader import GGUFTensor
from orcd.quant.dequant import dequantize, dequantize_to
from orcd.quant.registry import get_format

FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


class DeviceMirror:
    """A GGUF file's tensor data section copied to a device in one transfer (one copy instead of one per
    tensor: ~290 small synchronous copies cost ~0.6 s for a 0.5B model). Tensors whose bytes lie in the
    section become uint8 views of it; the section's alignment (>= 32 bytes per tensor) keeps every view
    aligned for the kernels' int16/int32 reinterpretations."""

    def __init__(self, section: np.ndarray, device: torch.device | str):
        """section: uint8 1-D array over the file's tensor data (a view of the mmap)."""
        self.base = section.__array_interface__["data"][0]
        self.nbytes = int(section.nbytes)
        self.device = torch.device(device)
        with warnings.catch_warnings():  # read-only mmap: copied to the device, never written
            warnings.simplefilter("ignore", UserWarning)
            self.blob = torch.from_numpy(section).to(self.device)

    def view(self, data: np.ndarray, device: torch.device | str) -> torch.Tensor | None:
        """data (a 2-D view of the same mmap) as a device view, or None if it is not in the section."""
        if torch.device(device) != self.device or not data.flags.c_contiguous:
            return None
        off = data.__array_interface__["data"][0] - self.base
        if off < 0 or off + data.nbytes > self.nbytes:
            return None
        return self.blob[off:off + data.nbytes].view(data.shape)

    def attach(self, tensors: dict[str, GGUFTensor]) -> None:
        """Give every tensor whose bytes lie in the section its device view (GGUFTensor.device_copy)."""
        for name, t in tensors.items():
            view = self.view(t.data if t.data.ndim == 2 else t.data.reshape(1, -1), self.device)
            if view is not None:
                tensors[name] = dataclasses.replace(t, device_copy=view)


def _same_device(have: torch.device, want: torch.device) -> bool:
    """A tensor's device (always indexed: cuda:0) vs a requested one ("cuda" = the current device)."""
    if want.type == "cuda" and want.index is None:
        want = torch.device("cuda", torch.cuda.current_device())
    return have == want


def raw_to_device(t: GGUFTensor, device: torch.device | str) -> torch.Tensor:
    """The tensor's bytes as uint8 [rows, row_bytes] on `device`: its device_copy when that lives on
    `device` (DeviceMirror.attach), else a private copy (never the mmap)."""
    data = t.data if t.data.ndim == 2 else t.data.reshape(1, -1)
    if t.device_copy is not None and _same_device(t.device_copy.device, torch.device(device)):
        return t.device_copy
    with warnings.catch_warnings():  # the mmap is read-only; we copy before anything could write
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.from_numpy(data)
    if torch.device(device).type == "cpu":
        return torch.from_numpy(np.array(data, copy=True))
    return raw.to(device)


def _fused(qtype: GGMLQuantizationType, device: torch.device):
    try:
        from orcd.quant.kernels import get_fused_linear
    except ImportError:
        return None
    return get_fused_linear(qtype, device)


def _split_linear(fused):
    """The split Q6_K weight's kernel (kernels/q6k_split.split_linear: fused_linear's routing and
    values) where `fused` says kernels run on its device, else None (forward then multiplies
    dense_weight())."""
    if fused is None:
        return None
    from orcd.quant.kernels.q6k_split import split_linear

    return split_linear


def _check_2d(t: GGUFTensor) -> tuple[int, int]:
    if len(t.shape) != 2:
        raise GGUFError(f"tensor {t.name} should be 2-D, has shape {t.shape}")
    get_format(t.qtype)  # UnsupportedQuantTypeError naming the type
    return t.shape[0], t.shape[1]


def _dense_split(raw: torch.Tensor, out_f: int, in_f: int, dtype: torch.dtype) -> torch.Tensor:
    """W [out, in] in dtype from Q6_K in the split layout: the Triton dequantize where it runs (CUDA, or
    the CPU under the interpreter), else the blocks put back in GGUF order and dequantized."""
    from orcd.quant.kernels.layout import unsplit_q6_k

    if _fused(GGMLQuantizationType.Q6_K, raw.device) is not None:
        from orcd.quant.kernels.dequant_kernel import dequantize_raw

        return dequantize_raw(raw, GGMLQuantizationType.Q6_K, out_f, in_f, dtype, split=True)
    return dequantize_to(unsplit_q6_k(raw), GGMLQuantizationType.Q6_K, (out_f, in_f), dtype)


LAYOUTS = ("gguf", "split")  # QuantLinear.layout: how raw holds the blocks
INVARIANT_CPU_ROWS = 16  # rows per GEMM call of the batch-invariant CPU path (QuantLinear._invariant_cpu)


class QuantLinear(nn.Module):
    """y = x @ W.T + b with W [out, in] held dense (`weight`) or as raw GGUF blocks (`raw`)."""

    batch_invariant = False  # fixed-tile GEMM on CUDA, fixed-shape chunks on the CPU (orcd.numerics)

    def __init__(self, out_features: int, in_features: int, qtype: GGMLQuantizationType, dtype: torch.dtype,
                 weight: torch.Tensor | None = None, raw: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, layout: str = "gguf"):
        """layout: how `raw` holds the blocks: "gguf" (the file's rows) or "split" (Q6_K only,
        kernels/layout.split_q6_k: its rows are not the weight's rows; to_split converts)."""
        super().__init__()
        self.out_features, self.in_features, self.qtype, self.dtype = out_features, in_features, qtype, dtype
        self.register_buffer("weight", weight, persistent=False)  # [out, in] dtype, or None
        self.register_buffer("raw", raw, persistent=False)  # uint8 [out, row_bytes], or None
        self.register_buffer("bias", bias, persistent=False)  # [out] dtype, or None
        q6k_raw = raw is not None and qtype == GGMLQuantizationType.Q6_K
        if layout not in LAYOUTS or (layout == "split" and not q6k_raw):
            raise ValueError(f"layout {layout!r}: one of {LAYOUTS}, 'split' only for raw Q6_K")
        self.layout = layout
        self._fused = _fused(qtype, raw.device) if raw is not None else None
        self._fused = _split_linear(self._fused) if layout == "split" else self._fused

    def to_split(self) -> None:
        """Rearrange the raw Q6_K blocks into the split layout in place (same bytes, same buffer)."""
        from orcd.quant.kernels.layout import split_q6_k

        if self.raw is None or self.qtype != GGMLQuantizationType.Q6_K or self.layout != "gguf":
            raise ValueError(f"to_split needs raw Q6_K in the gguf layout, not {self.extra_repr()}")
        self.raw.copy_(split_q6_k(self.raw))
        self.layout, self._fused = "split", _split_linear(self._fused)

    @classmethod
    def from_gguf(cls, weight: GGUFTensor, bias: GGUFTensor | None, device: torch.device | str,
                  dtype: torch.dtype, keep_quantized: bool) -> QuantLinear:
        out_f, in_f = _check_2d(weight)
        raw = raw_to_device(weight, device)
        b = None
        if bias is not None:
            if tuple(bias.shape) != (out_f,):
                raise GGUFError(f"bias {bias.name} has shape {bias.shape}, expected ({out_f},)")
            b = dequantize(raw_to_device(bias, device), bias.qtype, bias.shape).to(dtype)
        if keep_quantized and weight.qtype not in FLOAT_TYPES:
            return cls(out_f, in_f, weight.qtype, dtype, raw=raw, bias=b)
        w = dequantize_to(raw, weight.qtype, (out_f, in_f), dtype)
        return cls(out_f, in_f, weight.qtype, dtype, weight=w, bias=b)

    def dense_weight(self) -> torch.Tensor:
        """W [out, in] in self.dtype (a fresh tensor when kept quantized)."""
        if self.weight is not None:
            return self.weight
        if self.layout == "split":
            return _dense_split(self.raw, self.out_features, self.in_features, self.dtype)
        return dequantize_to(self.raw, self.qtype, (self.out_features, self.in_features), self.dtype)

    def _invariant_cpu(self, x2: torch.Tensor) -> torch.Tensor:
        """x2 [M, in] -> [M, out] on the CPU with every row computed by the same GEMM shape whatever M:
        rows in chunks of INVARIANT_CPU_ROWS, the last one padded with zeros. The CPU GEMM picks its
        blocking, and with it the summation order, from M: one prompt prefilled alone or beside two
        others gave logprobs 1e-7 apart. Relies on MKL's strict mode (orcd/__init__.py) on AVX-512."""
        w = self.weight if self.weight is not None else self.dense_weight()
        m = x2.shape[0]
        pad = -m % INVARIANT_CPU_ROWS
        if pad:
            x2 = torch.cat([x2, x2.new_zeros(pad, x2.shape[1])])
        y = torch.cat([F.linear(chunk, w, self.bias) for chunk in x2.split(INVARIANT_CPU_ROWS)])
        return y[:m]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in] -> [..., out] in self.dtype."""
        x = x.to(self.dtype)
        if self.batch_invariant:
            invariant = self._invariant if x.is_cuda else self._invariant_cpu
            return invariant(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)
        if self.weight is not None:
            return F.linear(x, self.weight, self.bias)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if self._fused is not None:  # fused_linear, or a split weight's split_linear (the same values)
            y = self._fused(x2, self.raw, self.out_features, self.in_features).to(self.dtype)
            if self.bias is not None:
                y = y + self.bias
        else:
            y = F.linear(x2, self.dense_weight(), self.bias)
        return y.reshape(*lead, self.out_features)

    def _invariant(self, x2: torch.Tensor) -> torch.Tensor:
        """x2 [M, in] -> [M, out] with one reduction order per row whatever M (orcd.numerics)."""
        from orcd.quant.kernels.invariant_linear import DENSE, invariant_kernel_types, invariant_linear

        if self.weight is not None:
            return invariant_linear(x2, self.weight, DENSE, bias=self.bias)
        if int(self.qtype) in invariant_kernel_types():
            return invariant_linear(x2, self.raw, int(self.qtype), self.out_features, self.bias,
                                    split=self.layout == "split")
        return invariant_linear(x2, self.dense_weight(), DENSE, bias=self.bias)

    def extra_repr(self) -> str:
        kept = ("raw" if self.layout == "gguf" else "raw, split") if self.raw is not None else "dense"
        return f"in={self.in_features}, out={self.out_features}, {self.qtype.name} ({kept}), {self.dtype}"


class QuantEmbedding(nn.Module):
    """Rows of a [vocab, hidden] table; kept quantized it dequantizes only the gathered rows."""

    def __init__(self, linear: QuantLinear):
        super().__init__()
        self.table = linear  # shares its buffers with as_linear()

    @classmethod
    def from_gguf(cls, weight: GGUFTensor, device: torch.device | str, dtype: torch.dtype,
                  keep_quantized: bool) -> QuantEmbedding:
        return cls(QuantLinear.from_gguf(weight, None, device, dtype, keep_quantized))

    @property
    def num_embeddings(self) -> int:
        return self.table.out_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [...] int -> [..., hidden] in dtype."""
        t = self.table
        if t.weight is not None:
            return t.weight[ids]
        if t.layout != "gguf":
            raise ValueError("an embedding gathers rows: its table cannot be in the split Q6_K layout")
        rows = t.raw[ids.reshape(-1)]  # uint8 [T, row_bytes]
        out = dequantize(rows, t.qtype, (rows.shape[0], t.in_features)).to(t.dtype)
        return out.reshape(*ids.shape, t.in_features)

    def as_linear(self) -> QuantLinear:
        """The tied LM head: the same buffers, used as a [vocab, hidden] linear."""
        return self.table
