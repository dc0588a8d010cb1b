"""Check a file's tensors against what the model class expects, before anything is allocated."""

from __future__ import annotations

from collections.abc import Mapping

from orcd.errors import GGUFError
from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile, GGUFTensor

Shape = tuple[int, ...]


def _describe(cfg: ModelConfig) -> str:
    return (f"{cfg.arch}: hidden {cfg.hidden_size}, {cfg.n_layers} layers, ffn {cfg.ffn_size}, "
            f"{cfg.n_heads}/{cfg.n_kv_heads} heads of {cfg.head_dim}, vocab {cfg.vocab_size}")


def _check(f: GGUFFile, t: GGUFTensor, shape: Shape, cfg: ModelConfig) -> None:
    from orcd.quant import get_format  # UnsupportedQuantTypeError naming the type

    if tuple(t.shape) != tuple(shape):
        raise GGUFError(f"{f.path.name}: tensor {t.name} has shape {list(t.shape)}, but the metadata "
                        f"({_describe(cfg)}) says {list(shape)}")
    try:
        get_format(t.qtype)
    except GGUFError as err:
        raise type(err)(f"{f.path.name}: tensor {t.name}: {err}") from None


def validate_tensors(f: GGUFFile, cfg: ModelConfig, expected: Mapping[str, Shape],
                     optional: Mapping[str, Shape] | None = None) -> None:
    """Every expected tensor is present with its shape and a supported type; optional ones, where
    present, too. Tensors nobody expects are ignored. Raises GGUFError (or UnsupportedQuantTypeError)."""
    missing = [name for name in expected if name not in f.tensors]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise GGUFError(f"{f.path.name}: missing tensor {missing[0]}{more}")
    for name, shape in expected.items():
        _check(f, f.tensors[name], shape, cfg)
    for name, shape in (optional or {}).items():
        if name in f.tensors:
            _check(f, f.tensors[name], shape, cfg)
