"""Fuzz harness shared by tests/gguf/test_fuzz.py (hypothesis, CI) and tests/gguf/fuzz_gguf.py (10k cases).

A mutation is driven by `draw(lo, hi) -> int` (hypothesis' data.draw or random.randint), so both
drivers exercise the same mutations: header fields set to boundary values, truncation, byte flips,
inserted or deleted bytes, one to three at a time, aimed mostly at the header.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gguf import GGMLQuantizationType as Q
from gguf_layout import Field, patch

from orcd.errors import OrcdError
from orcd.gguf.synth import write_model_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata

Draw = Callable[[int, int], int]
SMALL = dict(vocab_size=262, hidden=32, n_layers=1, ffn=64, n_heads=2, n_kv_heads=1)
SEEDS = {
    "qwen2": dict(arch="qwen2", tied=True, qtypes={"default": Q.Q8_0, "attn_q": Q.Q4_0, "attn_k": Q.Q5_0,
                                                   "attn_v": Q.Q5_1, "ffn_up": Q.Q4_1, "ffn_down": Q.F16}),
    "llama": dict(arch="llama", tied=False, qtypes={"default": Q.BF16, "output": Q.Q8_0}),
}
BOUNDARY = [0, 1, 2, 3, 7, 8, 31, 32, 255, 256, 4096, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
            2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def write_seeds(directory: Path) -> dict[str, bytes]:
    """Small valid files (~25 KB): every header construct, several quant types, a real vocabulary."""
    out = {}
    for name, spec in SEEDS.items():
        spec = dict(spec)
        arch = spec.pop("arch")
        tok = synthetic_tokenizer_metadata(SMALL["vocab_size"], arch)
        p = write_model_gguf(directory / f"seed-{name}.gguf", arch, tokenizer_metadata=tok, **spec, **SMALL)
        out[name] = p.read_bytes()
    return out


def _field_value(f: Field, data: bytes, draw: Draw) -> int:
    orig = int.from_bytes(data[f.offset : f.offset + f.size], "little")
    choice = draw(0, len(BOUNDARY) + 4)
    if choice < len(BOUNDARY):
        return BOUNDARY[choice]
    near = [orig + 1, orig - 1, orig * 2 + 1, len(data) - f.offset, draw(0, 2**64 - 1)]
    return near[choice - len(BOUNDARY)]


def mutate(data: bytes, fields: list[Field], draw: Draw) -> tuple[bytes, list[str]]:
    """Apply 1-3 mutations; returns the new bytes and a short description of each."""
    header_end = max(f.offset + f.size for f in fields) + 64
    ops: list[str] = []
    for _ in range(draw(1, 3)):
        kind = draw(0, 9)
        if kind <= 4 and fields:  # a header field: count, length, type, dim, offset, config value
            kinds = sorted({f.kind for f in fields})  # kind first: token lengths would crowd out the rest
            pick = kinds[draw(0, len(kinds) - 1)]
            of_kind = [f for f in fields if f.kind == pick]
            f = of_kind[draw(0, len(of_kind) - 1)]
            value = _field_value(f, data, draw)
            data = patch(data, f, value) if f.offset + f.size <= len(data) else data
            ops.append(f"{f.kind}({f.label})={value}")
        elif kind <= 6:  # truncate, mostly inside the header
            cut = draw(0, min(len(data), header_end) if draw(0, 3) else len(data))
            data = data[:cut]
            ops.append(f"truncate@{cut}")
        elif kind == 7:  # overwrite 1-8 bytes
            pos = draw(0, max(0, min(len(data), header_end) - 1))
            n = draw(1, 8)
            data = data[:pos] + bytes(draw(0, 255) for _ in range(n)) + data[pos + n :]
            ops.append(f"bytes@{pos}x{n}")
        elif kind == 8:  # insert bytes (shifts everything after)
            pos = draw(0, min(len(data), header_end))
            data = data[:pos] + bytes(draw(0, 255) for _ in range(draw(1, 16))) + data[pos:]
            ops.append(f"insert@{pos}")
        else:  # delete bytes
            pos = draw(0, max(0, min(len(data), header_end) - 1))
            n = draw(1, 16)
            data = data[:pos] + data[pos + n :]
            ops.append(f"delete@{pos}x{n}")
    return data, ops


def load(path: Path) -> str:
    """The whole load path on the CPU: reader, config, validation, tokenizer, model. Returns "ok" or the
    OrcdError's class name; any other exception propagates (that is a bug)."""
    from orcd.loading.loader import load_model

    try:
        lm = load_model(path, device="cpu")
    except OrcdError as err:
        msg = str(err)
        assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
        return type(err).__name__
    del lm
    return "ok"
