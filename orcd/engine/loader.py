"""Load a GGUF file into a ready model: config, validation, weights on the device (once), tokenizer.

The tokenizer (~0.3 s of Python and Rust for a 150k vocabulary) is built on a side thread while the
main thread uploads the weights: host-to-device copies and CUDA set-up release the GIL. Python's cyclic
GC is paused for the whole load: the ~300k vocabulary strings and merge tuples would otherwise trigger
full collections over every live object (~0.1 s measured) and nothing built here is garbage.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds (wall), see load_model


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


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off for the block (restored to its previous state after)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _start_tokenizer(metadata: dict[str, Any]) -> Callable[[], tuple[Any, float]]:
    """Build the tokenizer on a side thread; the returned join() gives (tokenizer, seconds) or re-raises
    the build's error (TokenizerError) in the caller's thread."""
    from orcd.tokenizer import load_tokenizer

    box: dict[str, Any] = {}

    def work() -> None:
        t = time.perf_counter()
        try:
            box["tok"] = load_tokenizer(metadata)
        except BaseException as err:  # re-raised by join()
            box["err"] = err
        box["s"] = time.perf_counter() - t

    thread = threading.Thread(target=work, name="orcd-tokenizer", daemon=True)
    thread.start()

    def join() -> tuple[Any, float]:
        thread.join()
        if "err" in box:
            raise box["err"]
        return box["tok"], box["s"]

    return join


def load_model(path: str | Path, device: str | torch.device = "auto", dtype: torch.dtype | None = None,
               keep_quantized: bool | None = None, tokenizer: bool = True) -> LoadedModel:
    """device "auto" = CUDA when available. dtype default: float32 on CPU, bfloat16 on CUDA.
    keep_quantized default: True on CUDA (raw GGUF blocks on the device), False on CPU.
    `LoadedModel.phases`: open (parse + check the header), check (config + tensor validation), weights
    (upload/dequantize), tokenizer (its build, overlapped with weights), tokenizer_wait (main thread
    waiting for it after the weights)."""
    with gc_paused():
        return _load(path, device, dtype, keep_quantized, tokenizer)


def _load(path: str | Path, device: str | torch.device, dtype: torch.dtype | None,
          keep_quantized: bool | None, tokenizer: bool) -> LoadedModel:
    t0 = time.perf_counter()
    dev = resolve_device(device)
    dtype = dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    keep_quantized = dev.type == "cuda" if keep_quantized is None else keep_quantized
    f = open_gguf(path)
    t1 = time.perf_counter()
    cls = get_model_class(f.architecture)  # an unknown architecture is named before any key is read
    cfg = model_config_from_gguf(f)
    required, optional = cls.expected_tensors(cfg)
    validate_tensors(f, cfg, required, optional)  # presence, type and shape, before any allocation
    t2 = time.perf_counter()
    join = _start_tokenizer(f.metadata) if tokenizer else None
    try:
        with torch.no_grad():
            model = cls.from_gguf(f, cfg, dev, dtype, keep_quantized).eval()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except BaseException:
        if join is not None:  # never leave the build running; the weights' error is the one raised
            with contextlib.suppress(Exception):
                join()
        raise
    t3 = time.perf_counter()
    tok, tok_s = join() if join is not None else (None, 0.0)
    t4 = time.perf_counter()
    phases = {"open": t1 - t0, "check": t2 - t1, "weights": t3 - t2, "tokenizer": tok_s,
              "tokenizer_wait": t4 - t3}
    loaded = LoadedModel(cfg, model, tok, f, dev, dtype, weights_nbytes(model), t4 - t0, phases)
    log.info("loaded %s (%s) on %s in %.2f s, %.1f MiB of weights", Path(path).name, cfg.arch, dev,
             loaded.load_seconds, loaded.weights_bytes / 2**20)
    return loaded
