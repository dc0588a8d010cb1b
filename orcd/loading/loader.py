"""Load a GGUF file into a ready model: config, validation, weights on the device (once), tokenizer.

The tokenizer (~0.3-0.5 s of Python and Rust for a 150k vocabulary) is built on a side thread while the
main thread uploads the weights (host-to-device copies release the GIL), and on CUDA another side thread
sets up what the first forward would otherwise pay for (`warm_cuda`, orcd/loading/warmup.py). While they
run, the GIL switch interval is 0.5 ms instead of 5: each time the main thread comes back from a GIL-free
copy it waits for a busy side thread to yield, up to one interval, a few hundred times per load. Until the
warm thread has the CUDA context the main thread waits for it with the GIL released
(`LoadOptions.wait_ctx`): its first CUDA call would otherwise wait for the driver inside torch's lazy
init, holding the GIL that the tokenizer's build needs. Python's cyclic GC is paused for the whole load:
the ~300k vocabulary strings and merge tuples would otherwise trigger full collections over every live
object (~0.1 s measured) and nothing built here is garbage. The whole load is bound by the GIL: ~1.3 s of
CPU time over ~0.8 s of wall time on the H100 host (docs/performance.md, "Load (session 4)")."""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orcd.gcpause import gc_paused
from orcd.gguf import GGUFFile, open_gguf
from orcd.gguf.config import ModelConfig, model_config_from_gguf
from orcd.gguf.validate import validate_tensors
from orcd.loading.q6k_layout import apply_q6k_layout, check_q6k_layout
from orcd.loading.warmup import warm_cuda
from orcd.models.registry import get_model_class
from orcd.quant.kernels import require_kernel_triton
from orcd.quant.linear import DeviceMirror
from orcd.tokenizer import load_tokenizer

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class LoadOptions:
    """How a load overlaps its parts; the defaults are the fast path (bench/load/load_time.py compares)."""

    overlap: bool = True  # the tokenizer and the CUDA warm-up on side threads
    switch_interval: float | None = 0.0005  # GIL switch interval (s) while loading; None: the process's
    # The main thread waits (GIL released) for the warm thread's CUDA context before its first CUDA call:
    # torch's lazy CUDA init would otherwise wait for the driver while holding the GIL (~70 ms measured).
    wait_ctx: bool = True
    parallel_warm: bool = True  # cuBLAS and the torch layer ops on a third thread (warmup.warm_cuda)


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
    timeline: dict[str, float] = field(default_factory=dict)  # phase -> when it ended, s after the start


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
def switch_interval(seconds: float | None) -> Iterator[None]:
    """sys.setswitchinterval(seconds) for the block (None: unchanged), restored after."""
    before = sys.getswitchinterval()
    if seconds is not None:
        sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _in_thread(fn: Callable[[], Any], name: str) -> Callable[[], tuple[Any, float]]:
    """Run fn() on a side thread; the returned join() gives (result, seconds fn took) or re-raises fn's
    error in the caller's thread."""
    box: dict[str, Any] = {}

    def work() -> None:
        t = time.perf_counter()
        try:
            box["value"] = fn()
        except BaseException as err:  # re-raised by join()
            box["err"] = err
        box["s"] = time.perf_counter() - t

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()

    def join() -> tuple[Any, float]:
        thread.join()
        if "err" in box:
            raise box["err"]
        return box["value"], box["s"]

    return join


def _ready(result: tuple[Any, float]) -> Callable[[], tuple[Any, float]]:
    return lambda: result


def _build_tokenizer(metadata: dict[str, Any]) -> Any:
    """The side thread's work. Its modules (jinja2, tokenizers) are imported with this module, on one
    thread: imported on the side thread while the warm-up threads and the main thread imported others,
    two loads on the H200 host failed there with ModuleNotFoundError for modules that exist
    (orcd.tokenizer.build, jinja2.defaults; sessions 36-37), ~40 ms of imports moved off the overlap."""
    return load_tokenizer(metadata)


def _mirror_for(f, cls, dev: torch.device, keep_quantized: bool):
    """One upload of the whole tensor data section (CUDA, weights kept quantized), or None. Not for
    architectures that rewrite tensors at load (llama's Q/K rows): the section's copy of those would
    be dead weight on the device."""
    if dev.type != "cuda" or not keep_quantized or getattr(cls, "qk_rows_permuted", False) or not f.tensors:
        return None
    buf = next(iter(f.tensors.values())).data.base
    while isinstance(buf, np.ndarray) and buf.base is not None:
        buf = buf.base  # the mmap every tensor view shares
    end = max(t.data.__array_interface__["data"][0] + t.data.nbytes for t in f.tensors.values())
    section = np.frombuffer(buf, dtype=np.uint8, offset=f.data_offset)
    section = section[: end - section.__array_interface__["data"][0]]
    return DeviceMirror(section, dev)


def load_model(path: str | Path, device: str | torch.device = "auto", dtype: torch.dtype | None = None,
               keep_quantized: bool | None = None, tokenizer: bool = True,
               options: LoadOptions = LoadOptions(), q6k_layout: str = "auto") -> LoadedModel:
    """device "auto" = CUDA when available. dtype default: float32 on CPU, bfloat16 on CUDA.
    keep_quantized default: True on CUDA (raw GGUF blocks on the device), False on CPU.
    q6k_layout: "auto" (split where the decode step reads it: CUDA, raw weights), "gguf" or "split" (raw
    Q6_K rearranged; orcd/loading/q6k_layout.py).
    `LoadedModel.phases`: open (parse + check the header), check (config + tensor validation), weights
    (upload/dequantize; upload, part of it: the one copy of the tensor data section), tokenizer (its
    build, overlapped with weights), tokenizer_wait (main thread waiting for it after the weights),
    warm_cuda / warm_wait (CUDA only: `orcd.loading.warmup.warm_cuda` on a side thread from the start,
    and the wait for it at the end; warm_*: its steps, see there), cuda_wait (CUDA: the main thread
    waiting for the warm thread's CUDA context, part of weights). `LoadedModel.timeline`: when each of
    those steps ended, in seconds after the start of the load, in order (cuda_ready: the context)."""
    with gc_paused(), switch_interval(options.switch_interval if options.overlap else None):
        return _load(path, device, dtype, keep_quantized, tokenizer, options, q6k_layout)


def _load(path: str | Path, device: str | torch.device, dtype: torch.dtype | None,
          keep_quantized: bool | None, tokenizer: bool, options: LoadOptions, q6k_layout: str) -> LoadedModel:
    t0 = time.perf_counter()
    dev = resolve_device(device)
    require_kernel_triton(dev)
    handoff: queue.SimpleQueue = queue.SimpleQueue()  # (file, config, dtype) for the warm-up, or None
    cuda_ready = threading.Event()  # set by the warm thread once the CUDA context and torch's state exist
    warm = None
    if dev.type == "cuda" and options.overlap:
        warm = _in_thread(lambda: warm_cuda(dev, handoff, cuda_ready, t0, parallel=options.parallel_warm),
                          "orcd-warm-cuda")
    dtype = dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    keep_quantized = dev.type == "cuda" if keep_quantized is None else keep_quantized
    join_tok = None
    try:
        q6k_layout = check_q6k_layout(q6k_layout, dev, keep_quantized)
        f = open_gguf(path)
        t1 = time.perf_counter()
        cls = get_model_class(f.architecture)  # an unknown architecture is named before any key is read
        cfg = model_config_from_gguf(f)
        required, optional = cls.expected_tensors(cfg)
        validate_tensors(f, cfg, required, optional)  # presence, type and shape, before any allocation
        handoff.put((f, cfg, dtype))
        t2 = time.perf_counter()
        if tokenizer:
            join_tok = _in_thread(lambda: _build_tokenizer(f.metadata), "orcd-tokenizer")
            if not options.overlap:
                join_tok = _ready(join_tok())
        t2w = time.perf_counter()
        if warm is not None and options.wait_ctx:
            cuda_ready.wait()  # the GIL released: see LoadOptions.wait_ctx
        t2c = time.perf_counter()
        mirror = _mirror_for(f, cls, dev, keep_quantized)
        t2u = time.perf_counter()
        if mirror is not None:
            mirror.attach(f.tensors)  # tensors in the upload become views of it
        with torch.no_grad():
            model = cls.from_gguf(f, cfg, dev, dtype, keep_quantized).eval()
            apply_q6k_layout(model, q6k_layout)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except BaseException:
        handoff.put(None)  # a warm thread still waiting for the file stops waiting
        for join in (join_tok, warm):  # never leave a side thread running; this error is the one raised
            if join is not None:
                with contextlib.suppress(Exception):
                    join()
        raise
    t3 = time.perf_counter()
    try:
        tok, tok_s = join_tok() if join_tok is not None else (None, 0.0)
    finally:
        t4 = time.perf_counter()
        warm_steps, warm_s = warm() if warm is not None else ({}, 0.0)  # warm_cuda itself never raises
    t5 = time.perf_counter()
    phases, timeline = _phases((t0, t1, t2, t2w, t2c, t2u, t3, t4, t5), tok_s, warm_s, warm_steps)
    loaded = LoadedModel(cfg, model, tok, f, dev, dtype, weights_nbytes(model), t5 - t0, phases, timeline)
    log.info("loaded %s (%s) on %s in %.2f s, %.1f MiB of weights", Path(path).name, cfg.arch, dev,
             loaded.load_seconds, loaded.weights_bytes / 2**20)
    return loaded


def _phases(instants: tuple[float, ...], tok_s: float, warm_s: float, warm_steps: dict[str, float]
            ) -> tuple[dict[str, float], dict[str, float]]:
    """LoadedModel.phases (seconds each step took) and .timeline (when each ended, in order) from the
    load's instants (perf_counter): start, opened, checked, tokenizer started, CUDA ready, uploaded,
    weights done, tokenizer joined, warm-up joined."""
    t0, t1, t2, t2w, t2c, t2u, t3, t4, t5 = instants
    phases = {"open": t1 - t0, "check": t2 - t1, "weights": t3 - t2w, "cuda_wait": t2c - t2w,
              "upload": t2u - t2c, "tokenizer": tok_s, "tokenizer_wait": t4 - t3, "warm_cuda": warm_s,
              "warm_wait": t5 - t4, **{k: v for k, v in warm_steps.items() if k[0] != "@"}}
    timeline = {"open": t1 - t0, "check": t2 - t0, "cuda_wait": t2c - t0, "upload": t2u - t0,
                "weights": t3 - t0, "tokenizer": t2 - t0 + tok_s, "warm": t5 - t0,
                **{k[1:]: v for k, v in warm_steps.items() if k[0] == "@"}}
    return phases, dict(sorted(timeline.items(), key=lambda kv: kv[1]))
