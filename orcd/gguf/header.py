"""Bounds-checked parser of a GGUF header (metadata and tensor infos). The file is untrusted input.

Every count and length is checked against the bytes that remain before anything is allocated for it, so a
crafted header cannot make us loop or allocate more than the file's own size justifies. Layout (v2/v3,
little-endian): magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type,
value) | n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset) | padding to
general.alignment | tensor data. A string is u64 length + UTF-8 bytes.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from orcd.errors import GGUFError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 1024  # tensor names (llama.cpp allows 64)
MAX_KEY = 65536
MIN_KV_BYTES = 8 + 4 + 1  # empty key, type, smallest value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset (0 dims)

# GGUF value type id -> (numpy dtype, size) for fixed-size scalars; 8 = string, 9 = array.
SCALARS: dict[int, tuple[str, int]] = {
    0: ("<u1", 1), 1: ("<i1", 1), 2: ("<u2", 2), 3: ("<i2", 2), 4: ("<u4", 4), 5: ("<i4", 4),
    6: ("<f4", 4), 7: ("<u1", 1), 10: ("<u8", 8), 11: ("<i8", 8), 12: ("<f8", 8),
}
T_BOOL, T_STRING, T_ARRAY, T_F32, T_F64 = 7, 8, 9, 6, 12
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # GGUF order: ne[0] is the innermost (row) dimension
    ggml_type: int
    offset: int  # relative to the start of the data section


@dataclass(frozen=True)
class Header:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    header_end: int  # first byte after the tensor infos


class Cursor:
    """Reads little-endian fields from a buffer; any read past the end is a GGUFError."""

    def __init__(self, buf: bytes | mmap.mmap, pos: int = 0):
        self.buf, self.pos, self.size = buf, pos, len(buf)

    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.remaining():
            raise GGUFError(f"truncated file: {what} needs {n} bytes at offset {self.pos}, "
                            f"{self.remaining()} remain")

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.u64(f"length of {what}")
        if limit is not None and n > limit:
            raise GGUFError(f"{what} is {n} bytes long, more than {limit}")
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} is not valid UTF-8") from None

    def scalars(self, vtype: int, count: int, what: str) -> np.ndarray:
        dtype, size = SCALARS[vtype]
        self.need(count * size, what)
        out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
        self.pos += count * size
        return out


def _value(cur: Cursor, vtype: int, key: str) -> Any:
    if vtype == T_STRING:
        return cur.string(f"value of {key}")
    if vtype == T_ARRAY:
        return _array(cur, key)
    if vtype not in SCALARS:
        raise GGUFError(f"metadata key {key} has invalid value type {vtype}")
    v = cur.scalars(vtype, 1, f"value of {key}")[0]
    return bool(v) if vtype == T_BOOL else (float(v) if vtype in (T_F32, T_F64) else int(v))


def _array(cur: Cursor, key: str) -> list[Any]:
    etype = cur.u32(f"element type of {key}")
    count = cur.u64(f"length of {key}")
    if etype == T_ARRAY:
        raise GGUFError(f"metadata key {key} is a nested array, which GGUF models do not use")
    if etype == T_STRING:
        if count * 8 > cur.remaining():  # every element has at least its u64 length
            raise GGUFError(f"metadata array {key} claims {count} strings, more than the file holds")
        return _strings(cur, count, key)
    if etype not in SCALARS:
        raise GGUFError(f"metadata array {key} has invalid element type {etype}")
    if count * SCALARS[etype][1] > cur.remaining():
        raise GGUFError(f"metadata array {key} claims {count} elements, more than the file holds")
    values = cur.scalars(etype, count, key)
    return values.astype(bool).tolist() if etype == T_BOOL else values.tolist()


def _strings(cur: Cursor, count: int, key: str) -> list[str]:
    """A string array (vocabularies: ~150k entries, so a tight loop with the bounds checks inline: a
    length field past the end is struct.error from unpack_from, a string past the end is `end > size`)."""
    buf, pos, size, unpack = cur.buf, cur.pos, cur.size, _U64.unpack_from
    out: list[str] = []
    append = out.append
    try:
        for _ in range(count):
            (n,) = unpack(buf, pos)
            pos += 8
            end = pos + n
            if end > size:
                raise GGUFError(f"metadata array {key}[{len(out)}] claims {n} bytes, more than remain")
            append(buf[pos:end].decode())
            pos = end
    except struct.error:
        raise GGUFError(f"truncated file: metadata array {key} runs past the end") from None
    except UnicodeDecodeError:
        raise GGUFError(f"metadata array {key}[{len(out)}] is not valid UTF-8") from None
    cur.pos = pos
    return out


def _tensor_info(cur: Cursor, i: int) -> TensorInfo:
    name = cur.string(f"name of tensor #{i}", MAX_NAME)
    n_dims = cur.u32(f"dimension count of {name}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    ne = tuple(cur.u64(f"dimensions of {name}") for _ in range(n_dims))
    ggml_type = cur.u32(f"type of {name}")
    offset = cur.u64(f"data offset of {name}")
    return TensorInfo(name, ne, ggml_type, offset)


def parse_header(buf: bytes | mmap.mmap) -> Header:
    """Parse and bounds-check everything before the tensor data. `buf` is the whole file (bytes or a
    read-only mmap: slicing either gives bytes). Raises GGUFError."""
    if len(buf) < 4 or bytes(buf[:4]) != MAGIC:
        raise GGUFError(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF')")
    cur = Cursor(buf, 4)
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and version >> 16:
            raise GGUFError("big-endian GGUF files are not supported")
        raise GGUFError(f"unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    if n_kv * MIN_KV_BYTES > cur.remaining():
        raise GGUFError(f"header claims {n_kv} metadata entries, more than the file can hold")
    if n_tensors * MIN_TENSOR_INFO_BYTES > cur.remaining():
        raise GGUFError(f"header claims {n_tensors} tensors, more than the file can hold")
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"key of metadata entry #{i}", MAX_KEY)
        if key in metadata:
            raise GGUFError(f"metadata key {key} appears twice")
        metadata[key] = _value(cur, cur.u32(f"value type of {key}"), key)
    if n_tensors * MIN_TENSOR_INFO_BYTES > cur.remaining():
        raise GGUFError(f"header claims {n_tensors} tensors, more than the file can hold")
    tensors = [_tensor_info(cur, i) for i in range(n_tensors)]
    return Header(version, metadata, tensors, cur.pos)
