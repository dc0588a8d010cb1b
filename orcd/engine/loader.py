"""Load a GGUF file into a ready model: config, validation, weights on the device (once), tokenizer."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from orcd.gguf import GGUFFile, open_gguf
from orcd.gguf.config import ModelConfig, model_config_from_gguf
from orcd.gguf.validate import validate_tensors
from orcd.models.registry import get_model_class

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    cfg: ModelConfig
    model: torch.nn.Module
    tokenizer: Any  # orcd.tokenizer.GGUFTokenizer, or None when loaded with tokenizer=False
    gguf: GGUFFile
    device: torch.device
    dtype: torch.dtype
    weights_bytes: int  # bytes of weights held on the device (shared tensors counted once)
    load_seconds: float


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def weights_nbytes(model: torch.nn.Module) -> int:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def load_model(path: str | Path, device: str | torch.device = "auto", dtype: torch.dtype | None = None,
               keep_quantized: bool | None = None, tokenizer: bool = True) -> LoadedModel:
    """device "auto" = CUDA when available. dtype default: float32 on CPU, bfloat16 on CUDA.
    keep_quantized default: True on CUDA (raw GGUF blocks on the device), False on CPU."""
    t0 = time.perf_counter()
    dev = resolve_device(device)
    dtype = dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    keep_quantized = dev.type == "cuda" if keep_quantized is None else keep_quantized
    f = open_gguf(path)
    cls = get_model_class(f.architecture)  # an unknown architecture is named before any key is read
    cfg = model_config_from_gguf(f)
    required, optional = cls.expected_tensors(cfg)
    validate_tensors(f, cfg, required, optional)  # presence, type and shape, before any allocation
    tok = None
    if tokenizer:
        from orcd.tokenizer import load_tokenizer

        tok = load_tokenizer(f.metadata)
    with torch.no_grad():
        model = cls.from_gguf(f, cfg, dev, dtype, keep_quantized).eval()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    loaded = LoadedModel(cfg, model, tok, f, dev, dtype, weights_nbytes(model), time.perf_counter() - t0)
    log.info("loaded %s (%s) on %s in %.2f s, %.1f MiB of weights", Path(path).name, cfg.arch, dev,
             loaded.load_seconds, loaded.weights_bytes / 2**20)
    return loaded
