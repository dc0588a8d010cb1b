"""The E2M1 -> int8 lookup of the int8 MXFP4 MoE GEMV (moe_mxfp4_int8.py), on the CPU: its inline PTX (byte
permutes) run by a small emulator of the five instructions it uses (prmt in its default mode: 3-bit byte
index, bit 3 sign replication), for every nibble in every position, against gguf's MXFP4 dequantize."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from orcd.quant.kernels.moe_mxfp4_int8 import PRMT_PTX

M32 = 0xFFFFFFFF


def prmt(a: int, b: int, c: int) -> int:
    """PTX prmt.b32 default mode: byte i of d = byte (c's nibble i & 7) of {b, a}, or its sign (bit 3)."""
    src = (b << 32) | a
    d = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = (src >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        d |= byte << (8 * i)
    return d


OPS = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "shr": lambda a, b: a >> b, "mov": lambda a: a,
       "prmt": prmt}


def run_ptx(text: str, q: int) -> tuple[int, int]:
    """Execute the asm block on input $2 = q -> ($0, $1)."""
    regs = {"$2": q & M32}

    def val(tok: str) -> int:
        return int(tok, 16) if tok.startswith("0x") else int(tok) if tok.isdigit() else regs[tok]

    for line in text.splitlines():
        m = re.match(r"\s*(\w+)\.b32 (.+);", line)
        if not m:
            continue
        op, args = m.group(1), [t.strip() for t in m.group(2).split(",")]
        regs[args[0]] = OPS[op](*[val(t) for t in args[1:]]) & M32
    return regs["$0"], regs["$1"]


def e2m1_x2() -> list[int]:
    """2 * the E2M1 value of each code 0..15: gguf's dequantize of blocks with scale 2 ** 0 (e = 127)."""
    blocks = np.zeros((16, 17), dtype=np.uint8)
    blocks[:, 0] = 127
    blocks[np.arange(16), 1] = np.arange(16)  # element 0 of block c = code c
    w = dequantize(blocks.reshape(-1), Q.MXFP4).reshape(16, 32)[:, 0]
    return [int(v) for v in w * 2]


def test_table_is_twice_e2m1():
    assert e2m1_x2() == [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


@pytest.mark.parametrize("seed", [0, 1])
def test_prmt_lookup_every_nibble_every_position(seed):
    """Each code word (8 nibbles) -> (low nibbles' int8s, high nibbles' int8s), byte i for byte i of q."""
    table = e2m1_x2()
    rng = np.random.default_rng(seed)
    words = [sum(((c + s) % 16) << (4 * s) for s in range(8)) for c in range(16)]  # every code everywhere
    words += [int(v) for v in rng.integers(0, 2**32, 64, dtype=np.uint64)]
    for q in words:
        lo, hi = run_ptx(PRMT_PTX, q)
        for i in range(4):
            byte = (q >> (8 * i)) & 0xFF
            assert np.int8(np.uint8((lo >> (8 * i)) & 0xFF)) == table[byte & 0xF], hex(q)
            assert np.int8(np.uint8((hi >> (8 * i)) & 0xFF)) == table[byte >> 4], hex(q)
