"""Open a GGUF file: metadata as plain Python values, tensors as raw uint8 memory-mapped views.

The file is untrusted. `orcd.gguf.header` parses the header with every count, length and type checked
against the bytes that remain; here each tensor's type, dimensions, alignment and data range are checked
against the file before a view of its bytes is made. (gguf.GGUFReader is not used to parse: it needs
~13 s for a 150k-token vocabulary and trusts the header's counts.) Any failure is a one-line GGUFError.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from orcd.errors import GGUFError, UnsupportedQuantTypeError
from orcd.gguf.header import TensorInfo, parse_header

DEFAULT_ALIGNMENT = 32
MAX_ALIGNMENT = 1 << 20
MAX_ELEMENTS = 1 << 48  # per tensor; far above any real model, far below int64 overflow


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # torch order (outermost first): a [out, in] weight is (out, in); GGUF ne reversed
    data: np.ndarray  # raw bytes, uint8 [prod(shape[:-1]), row_bytes] (1 row for 1-D); read-only mmap view
    # the same bytes already on a device (a view of quant.linear.DeviceMirror's one upload), or None
    device_copy: Any = None

    @property
    def n_bytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass
class GGUFFile:
    path: Path
    file_size: int
    version: int
    metadata: dict[str, Any]  # key -> int | float | bool | str | list of those
    tensors: dict[str, GGUFTensor]
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0  # file offset of the tensor data section

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path.name}: missing metadata key general.architecture")
        return arch


def _alignment(metadata: dict[str, Any]) -> int:
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (not isinstance(align, int) or isinstance(align, bool) or not 0 < align <= MAX_ALIGNMENT
            or align & (align - 1)):
        raise GGUFError(f"general.alignment={align!r} is not a power of two up to {MAX_ALIGNMENT}")
    return align


def tensor_nbytes(info: TensorInfo) -> tuple[GGMLQuantizationType, int]:
    """Checked (type, byte size) of a tensor from its header entry."""
    try:
        qtype = GGMLQuantizationType(info.ggml_type)
        block, size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        msg = f"tensor {info.name} has unknown GGML type {info.ggml_type}"
        raise UnsupportedQuantTypeError(msg) from None
    n = 1
    for d in info.ne:
        if d <= 0:
            raise GGUFError(f"tensor {info.name} has a dimension of {d}")
        n *= d
        if n > MAX_ELEMENTS:
            raise GGUFError(f"tensor {info.name} has dimensions {list(info.ne)}: too many elements")
    if info.ne[0] % block:
        raise GGUFError(f"tensor {info.name}: row of {info.ne[0]} is not a whole number of "
                        f"{qtype.name} blocks of {block}")
    return qtype, n // block * size


def _tensor(buf: mmap.mmap | bytes, info: TensorInfo, data_offset: int, align: int,
            file_size: int) -> GGUFTensor:
    qtype, nbytes = tensor_nbytes(info)
    if info.offset % align:
        raise GGUFError(f"tensor {info.name} data offset {info.offset} is not aligned to {align}")
    start = data_offset + info.offset
    if start + nbytes > file_size:
        raise GGUFError(f"tensor {info.name} data ({nbytes} bytes at {start}) runs past the end of the "
                        f"file ({file_size} bytes): truncated?")
    shape = tuple(reversed(info.ne))
    rows = math.prod(shape[:-1])
    data = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=start).reshape(rows, nbytes // rows)
    return GGUFTensor(info.name, qtype, shape, data)


def read_gguf(buf: mmap.mmap | bytes, path: Path) -> GGUFFile:
    """Parse and check a whole GGUF image held in `buf` (the file's bytes or a read-only mmap)."""
    size = len(buf)
    header = parse_header(buf)
    align = _alignment(header.metadata)
    data_offset = -(-header.header_end // align) * align
    if header.tensors and data_offset > size:
        raise GGUFError(f"truncated file: tensor data should start at {data_offset}, file has {size} bytes")
    tensors: dict[str, GGUFTensor] = {}
    for info in header.tensors:
        if info.name in tensors:
            raise GGUFError(f"tensor {info.name} appears twice")
        tensors[info.name] = _tensor(buf, info, data_offset, align, size)
    return GGUFFile(path, size, header.version, header.metadata, tensors, align, data_offset)


def one_line(msg: str, limit: int = 300) -> str:
    """Names in messages come from the file: escape what is not printable, bound the length."""
    msg = "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg[: limit * 2])
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def open_gguf(path: str | Path) -> GGUFFile:
    """Memory-map and check a GGUF file. Bad files raise GGUFError (one line, naming the file)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            if size < 24:
                raise GGUFError(f"{path.name}: file of {size} bytes is too short to be a GGUF file")
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as err:
        raise GGUFError(f"{path.name}: cannot read file ({err.strerror or err})") from None
    try:
        return read_gguf(buf, path)
    except GGUFError as err:
        raise type(err)(one_line(f"{path.name}: {err}")) from None
    except (ValueError, OverflowError, IndexError, struct.error) as err:  # defence in depth: checks above
        raise GGUFError(f"{path.name}: malformed GGUF file ({type(err).__name__}: {err})") from None
