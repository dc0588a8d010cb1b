"""Test helper: where each header field of a valid GGUF file lies, found by an independent walk.

Used to craft bad files (tests) and to aim mutations at counts, lengths, types, dims and offsets (fuzz).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass(frozen=True)
class Field:
    kind: str  # version | n_tensors | n_kv | key_len | vtype | str_len | arr_type | arr_len | name_len |
    #            n_dims | dim | ttype | toffset | value (a 4- or 8-byte scalar)
    offset: int
    size: int  # 4 or 8 (little-endian unsigned)
    label: str  # metadata key or tensor name it belongs to


def _u(b: bytes, off: int, size: int) -> int:
    return struct.unpack_from("<I" if size == 4 else "<Q", b, off)[0]


def header_fields(b: bytes) -> list[Field]:
    out = [Field("version", 4, 4, ""), Field("n_tensors", 8, 8, ""), Field("n_kv", 16, 8, "")]
    n_tensors, n_kv, pos = _u(b, 8, 8), _u(b, 16, 8), 24

    def string(kind: str, label: str) -> tuple[str, int]:
        n = _u(b, pos, 8)
        out.append(Field(kind, pos, 8, label))
        return b[pos + 8 : pos + 8 + n].decode(), pos + 8 + n

    for _ in range(n_kv):
        key, pos = string("key_len", "")
        vtype = _u(b, pos, 4)
        out.append(Field("vtype", pos, 4, key))
        pos += 4
        if vtype == 8:
            _, pos = string("str_len", key)
        elif vtype == 9:
            etype, count = _u(b, pos, 4), _u(b, pos + 4, 8)
            out += [Field("arr_type", pos, 4, key), Field("arr_len", pos + 4, 8, key)]
            pos += 12
            for _ in range(count):
                if etype == 8:
                    _, pos = string("str_len", key)
                else:
                    pos += SCALAR_SIZES[etype]
        else:
            if SCALAR_SIZES[vtype] >= 4:  # numbers a config is built from
                out.append(Field("value", pos, SCALAR_SIZES[vtype], key))
            pos += SCALAR_SIZES[vtype]
    for _ in range(n_tensors):
        name, pos = string("name_len", "")
        n_dims = _u(b, pos, 4)
        out.append(Field("n_dims", pos, 4, name))
        pos += 4
        for _ in range(n_dims):
            out.append(Field("dim", pos, 8, name))
            pos += 8
        out += [Field("ttype", pos, 4, name), Field("toffset", pos + 4, 8, name)]
        pos += 12
    return out


def patch(b: bytes, field: Field, value: int) -> bytes:
    """b with `field` set to value (mod 2**bits)."""
    raw = (value % (1 << (8 * field.size))).to_bytes(field.size, "little")
    return b[: field.offset] + raw + b[field.offset + field.size :]


def find(fields: list[Field], kind: str, label: str | None = None) -> Field:
    return next(f for f in fields if f.kind == kind and (label is None or f.label == label))
