"""Write random-weight qwen2/llama GGUF files with llama.cpp tensor names and metadata keys.

Used by tests (tiny models loaded by orcd and by HF transformers) and by `orcd synth` (real-shaped
models for benchmarks). Tensors are generated and written one at a time, so memory stays flat.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from orcd.gguf import config as K
from orcd.gguf.synth_archs import ARCHS, arch_tensor_shapes
from orcd.gguf.synth_blocks import FLOAT_TYPES, random_tensor, row_bytes
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata

Q = GGMLQuantizationType
SUPPORTED_ARCHS = ("qwen2", "llama", *ARCHS)
WEIGHT_STD = 0.05  # matrices; keeps a tiny model's logits O(1)
BIAS_STD = 0.02


def tensor_shapes(arch: str, vocab_size: int, hidden: int, n_layers: int, ffn: int, n_heads: int,
                  n_kv_heads: int, tied: bool, head_dim: int | None = None) -> dict[str, tuple[int, ...]]:
    """name -> shape in torch order ([out, in] for weights), in llama.cpp file order."""
    hd = head_dim or hidden // n_heads
    other = arch_tensor_shapes(arch, vocab_size, hidden, n_layers, ffn, n_heads, n_kv_heads, tied, hd)
    if other is not None:
        return other
    q_out, kv_out = n_heads * hd, n_kv_heads * hd
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab_size, hidden)}
    for i in range(n_layers):
        p = f"blk.{i}."
        shapes[p + "attn_norm.weight"] = (hidden,)
        for name, out in (("attn_q", q_out), ("attn_k", kv_out), ("attn_v", kv_out)):
            shapes[p + name + ".weight"] = (out, hidden)
            if arch == "qwen2":
                shapes[p + name + ".bias"] = (out,)
        shapes[p + "attn_output.weight"] = (hidden, q_out)
        shapes[p + "ffn_norm.weight"] = (hidden,)
        shapes[p + "ffn_gate.weight"] = (ffn, hidden)
        shapes[p + "ffn_up.weight"] = (ffn, hidden)
        shapes[p + "ffn_down.weight"] = (hidden, ffn)
    shapes["output_norm.weight"] = (hidden,)
    if not tied:
        shapes["output.weight"] = (vocab_size, hidden)
    return shapes


def _matches(name: str, pattern: str) -> bool:
    """fnmatch when the pattern has * ? [; else the name without its "blk.N." prefix must be the pattern
    or start with pattern + "." ("attn_v" matches blk.3.attn_v.weight; "output" not attn_output)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    parts = name.split(".")
    base = ".".join(parts[2:]) if parts[0] == "blk" and len(parts) > 2 else name
    return base == pattern or base.startswith(pattern + ".")


def resolve_qtype(name: str, shape: tuple[int, ...], qtypes: Mapping[str, GGMLQuantizationType]) -> Q:
    """Type of one tensor: norms, biases and other 1-D tensors are F32; else the exact name, then the first
    pattern that matches (see _matches), then "default" (F32 if absent)."""
    if len(shape) == 1:
        return Q.F32
    if name in qtypes:
        return Q(qtypes[name])
    for pattern, qtype in qtypes.items():
        if pattern != "default" and _matches(name, pattern):
            return Q(qtype)
    return Q(qtypes.get("default", Q.F32))


def _tensor_nbytes(qtype: Q, shape: tuple[int, ...]) -> int:
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    if qtype == Q.F32:
        return rows * shape[-1] * 4
    if qtype in (Q.F16, Q.BF16):
        return rows * shape[-1] * 2
    return rows * row_bytes(qtype, shape[-1])


def _add_metadata(w: GGUFWriter, md: Mapping[str, Any]) -> None:
    for key, value in md.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            (w.add_uint32 if 0 <= value < 2**32 else w.add_int64)(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, (list, tuple)):
            if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                w.add_key_value(key, list(value), GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
            else:
                w.add_array(key, list(value))
        else:
            raise TypeError(f"metadata value for {key} has unsupported type {type(value).__name__}")


def model_metadata(arch: str, *, hidden: int, n_layers: int, ffn: int, n_heads: int, n_kv_heads: int,
                   context_length: int, rope_theta: float, rms_eps: float, head_dim: int) -> dict[str, Any]:
    a = arch + "."
    return {
        "general.name": f"orcd-synthetic-{arch}",
        "general.quantization_version": 2,
        a + K.K_CONTEXT: context_length,
        a + K.K_EMBED: hidden,
        a + K.K_BLOCKS: n_layers,
        a + K.K_FFN: ffn,
        a + K.K_HEADS: n_heads,
        a + K.K_KV_HEADS: n_kv_heads,
        a + K.K_RMS_EPS: rms_eps,
        a + K.K_ROPE_BASE: rope_theta,
        a + K.K_ROPE_DIM: head_dim,
    }


def write_model_gguf(
    path: str | Path, arch: str, *, vocab_size: int, hidden: int, n_layers: int, ffn: int, n_heads: int,
    n_kv_heads: int, context_length: int = 2048, tied: bool = True,
    qtypes: Mapping[str, GGMLQuantizationType] | None = None, seed: int = 0,
    tokenizer_metadata: Mapping[str, Any] | None = None, extra_metadata: Mapping[str, Any] | None = None,
    rope_theta: float = 10000.0, rms_eps: float = 1e-6, head_dim: int | None = None,
) -> Path:
    """Write a random-weight model. tokenizer_metadata=None writes a synthetic byte-level BPE vocabulary
    of `vocab_size` tokens; pass {} to write none. Returns the path."""
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"synth supports {SUPPORTED_ARCHS}, not {arch!r}")
    path = Path(path)
    hd = head_dim or hidden // n_heads
    shapes = tensor_shapes(arch, vocab_size, hidden, n_layers, ffn, n_heads, n_kv_heads, tied, hd)
    types = {name: resolve_qtype(name, shape, qtypes or {}) for name, shape in shapes.items()}
    md = model_metadata(arch, hidden=hidden, n_layers=n_layers, ffn=ffn, n_heads=n_heads,
                        n_kv_heads=n_kv_heads, context_length=context_length, rope_theta=rope_theta,
                        rms_eps=rms_eps, head_dim=hd)
    if head_dim is not None and head_dim != hidden // n_heads:
        md[f"{arch}.{K.K_KEY_LEN}"] = md[f"{arch}.attention.value_length"] = head_dim
    if tokenizer_metadata is None:
        tokenizer_metadata = synthetic_tokenizer_metadata(vocab_size, arch, seed)
    md.update(tokenizer_metadata)
    md.update(extra_metadata or {})
    return write_gguf(path, arch, md, shapes, types, seed)


def write_gguf(path: str | Path, arch: str, md: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
               types: Mapping[str, Q], seed: int = 0) -> Path:
    """Write metadata `md` and random tensors of `shapes` (torch order) and `types`, in that order."""
    path = Path(path)
    w = GGUFWriter(path, arch)
    _add_metadata(w, md)
    for name, shape in shapes.items():  # declare every tensor first (header), then stream the data
        qtype = types[name]
        np_dtype = {Q.F32: np.float32, Q.F16: np.float16}.get(qtype, np.uint8)
        byte_shape = shape if np_dtype is not np.uint8 else (*shape[:-1], _tensor_nbytes(qtype, shape[-1:]))
        w.add_tensor_info(name, byte_shape, np.dtype(np_dtype), _tensor_nbytes(qtype, shape),
                          raw_dtype=None if np_dtype is not np.uint8 else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        w.write_tensor_data(_random_payload(name, shape, types[name], rng))
    w.close()
    return path


def _random_payload(name: str, shape: tuple[int, ...], qtype: Q, rng: np.random.Generator) -> np.ndarray:
    if name.endswith("norm.weight"):  # RMSNorm gains near 1
        return random_tensor(Q.F32, shape, rng, 0.1, mean=1.0)
    if name.endswith(".bias"):
        return random_tensor(Q.F32, shape, rng, BIAS_STD)
    if name.endswith("attn_sinks.weight"):  # gpt-oss: per-head logits, as large as attention scores
        return random_tensor(Q.F32, shape, rng, 1.0)
    data = random_tensor(qtype, shape, rng, WEIGHT_STD)
    if qtype not in FLOAT_TYPES or qtype == Q.BF16:
        data = data.reshape(*shape[:-1], -1)  # uint8 [..., row_bytes]
    return data
