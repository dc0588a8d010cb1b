"""CUDA warm-up on side threads of load_model, while the main thread parses and uploads the weights.

`warm_cuda` sets up what the first forward would otherwise pay for on the critical path: the CUDA
context, created through the driver API first (ctypes releases the GIL for the call, so the threads
that parse the file and build the tokenizer keep running; `cuda_ready` tells the main thread when it
may make its own first CUDA call), then torch's CUDA state. Meanwhile a second thread imports Triton,
installs its cache key (orcd/quant/kernels/triton_key.py: hashing libtriton takes ~0.4 s, so it is
remembered across processes) and imports the module Triton loads on its first launch.

Then, once the main thread hands over (file, config, dtype), the first eager forward's one-time costs:
each Triton kernel's cache lookup and module load, Triton's driver, each CUDA kernel of torch's ops (lazy
module loading, ~1-30 ms each), cuBLAS's handle and heuristics for each GEMM shape, the flash-attention
module. The warm-up runs the same kernels, with the file's own weight shapes and quant types, on zero-
filled stand-ins (zero blocks decode to zeros: nothing non-finite), so that the first real forward only
does its own work. With `parallel` (LoadOptions.parallel_warm) a third thread runs cuBLAS and the torch
layer ops while the warm thread waits for Triton and runs the products: torch releases the GIL while an op
runs, so those module loads overlap Python elsewhere (load 0.90 -> 0.82 s, median of 8 each, A/B on an
H200). Results are thrown away; nothing here touches the model, and the model never waits for it except at
the end of load_model. `warm_first_forward` is the same work on the calling thread."""

from __future__ import annotations

import contextlib
import ctypes
import queue
import threading
import time

import torch
import torch.nn.functional as F

from orcd.gguf.config import ModelConfig
from orcd.gguf.reader import GGUFFile

PROMPT = 8  # tokens of the stand-in prefill (more than GEMV_MAX_N: the dequantize + GEMM path)
MAX_STANDIN_BYTES = 32 << 20  # larger matrices (the vocabulary ones) get a stand-in of 64 rows


def _products(f: GGUFFile) -> list[tuple[int, int, int, bool]]:
    """Distinct (qtype, out, in, has bias) of the file's 2-D quantized weights."""
    seen = {}
    for name, t in f.tensors.items():
        if len(t.shape) == 2 and name.endswith(".weight"):
            seen[(int(t.qtype), *t.shape, name[: -len("weight")] + "bias" in f.tensors)] = None
    return list(seen)


def _warm_products(f: GGUFFile, vocab: int, dev: torch.device, dtype: torch.dtype) -> int:
    """Each distinct product as the prefill runs it (dequantize + GEMM), and the LM head (out = vocab) as
    the last token's logits do (GEMV); returns how many were run. A cold Triton cache compiles each."""
    import orcd.models.layers.attention_triton  # noqa: F401  (the first attention call imports it)
    from orcd.quant.kernels import get_fused_linear
    from orcd.quant.registry import get_format

    done = 0
    for qt, out_f, in_f, has_bias in _products(f):
        fused = get_fused_linear(qt, dev)
        if fused is None:
            continue
        row_bytes = get_format(qt).row_bytes(in_f)
        rows = out_f if out_f * row_bytes <= MAX_STANDIN_BYTES else 64
        raw = torch.zeros(rows, row_bytes, dtype=torch.uint8, device=dev)
        bias = torch.zeros(rows, dtype=dtype, device=dev) if has_bias else None
        x = torch.zeros(PROMPT, in_f, dtype=dtype, device=dev)
        for n in (PROMPT, 1) if out_f == vocab else (PROMPT,):
            y = fused(x[:n], raw, rows, in_f)
            if bias is not None:
                y = y + bias
        done += 1
    return done


def _warm_layers(f: GGUFFile, cfg: ModelConfig, dev: torch.device, dtype: torch.dtype) -> bool:
    from orcd.models.layers.norm import RMSNorm
    from orcd.models.layers.rotary import RotaryEmbedding, apply_rotary
    from orcd.quant.dequant import dequantize

    emb = f.tensors.get("token_embd.weight")
    if emb is not None:  # the embedding gathers rows (uint8, int64 ids) and dequantizes them with torch ops
        table = torch.zeros(PROMPT, emb.data.shape[-1], dtype=torch.uint8, device=dev)
        rows = table[torch.zeros(PROMPT, dtype=torch.int64, device=dev)]
        dequantize(rows, emb.qtype, (PROMPT, cfg.hidden_size)).to(dtype)
    x = torch.zeros(PROMPT, cfg.hidden_size, dtype=dtype, device=dev)
    h = RMSNorm(torch.ones(cfg.hidden_size, dtype=dtype, device=dev), cfg.rms_eps)(x) + x
    F.silu(h) * h
    rot = RotaryEmbedding(cfg.rope_dim, cfg.rope_theta, device=dev)
    cos, sin = rot.cos_sin(torch.arange(PROMPT, device=dev), dtype)
    q = apply_rotary(torch.zeros(PROMPT, cfg.n_heads, cfg.head_dim, dtype=dtype, device=dev), cos, sin)
    k = torch.zeros(PROMPT, cfg.n_kv_heads, cfg.head_dim, dtype=dtype, device=dev)
    cu = torch.tensor([0, PROMPT], dtype=torch.int32, device=dev)
    if dtype in (torch.float16, torch.bfloat16):  # the prefill's varlen flash attention
        torch.ops.aten._flash_attention_forward(q, k, k, cu, cu, PROMPT, PROMPT, 0.0, True, False,
                                                scale=cfg.head_dim**-0.5)
    torch.zeros(1, cfg.vocab_size, dtype=torch.float32, device=dev).argmax(-1)  # no sync, as above
    return True


def warm_first_forward(f: GGUFFile, cfg: ModelConfig, dev: torch.device, dtype: torch.dtype) -> dict:
    """Best effort: a failure ends that part (the first forward then pays for what was not warmed).
    Returns {"products": distinct products run, "layers": whether the layer ops all ran}."""
    done = {"products": 0, "layers": False}
    with torch.inference_mode(), contextlib.suppress(Exception):
        done["products"] = _warm_products(f, cfg.vocab_size, dev, dtype)
    with torch.inference_mode(), contextlib.suppress(Exception):
        done["layers"] = _warm_layers(f, cfg, dev, dtype)
    return done


def retain_primary_context(index: int) -> None:
    """Create (retain) device `index`'s primary context with the driver API, the GIL released."""
    lib = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for rc in (lib.cuInit(0), lib.cuDeviceGet(ctypes.byref(dev), index),
               lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)):
        if rc != 0:
            raise RuntimeError(f"CUDA driver error {rc}")


def _warm_triton(steps: dict[str, float], origin: float) -> None:
    t = time.perf_counter()
    with contextlib.suppress(Exception):
        from orcd.quant.kernels.triton_key import install_cached_triton_key

        install_cached_triton_key()
    t1 = time.perf_counter()
    with contextlib.suppress(Exception):
        import triton.experimental.gluon  # noqa: F401
    t2 = time.perf_counter()
    steps.update({"warm_triton_key": t1 - t, "@warm_triton_key": t1 - origin, "warm_gluon": t2 - t1,
                  "@warm_gluon": t2 - origin})


def warm_cuda(dev: torch.device, handoff: queue.SimpleQueue | None = None,
              cuda_ready: threading.Event | None = None, origin: float | None = None,
              parallel: bool = True) -> dict[str, float]:
    """Best effort, nothing here changes results, any failure is ignored (the first forward then pays).
    `handoff` gives (file, config, dtype) for `warm_first_forward`, or None (nothing to do).
    `cuda_ready` is set once the CUDA context and torch's CUDA state exist (or creating them failed):
    until then another thread's first CUDA call would wait for the driver while holding the GIL.
    Returns the seconds each step took: warm_ctx, warm_cublas (starting its thread, with `parallel`),
    warm_triton_key, warm_gluon (on a second thread), warm_triton_wait, warm_forward (the products),
    warm_torch (cuBLAS and the layer ops: a third thread, or first on this one without `parallel`) and
    warm_torch_wait; what the warm-up ran: warm_products (count), warm_layers (1.0 if all); and "@" +
    step: when it ended, in seconds after `origin` (a time.perf_counter() instant; default: this call)."""
    steps: dict[str, float] = {}
    origin = time.perf_counter() if origin is None else origin
    tri = threading.Thread(target=_warm_triton, args=(steps, origin), name="orcd-warm-triton", daemon=True)
    tri.start()
    t = time.perf_counter()

    def done(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name], steps["@" + name], t = now - t, now - origin, now

    try:
        with contextlib.suppress(Exception):
            retain_primary_context(dev.index or 0)
        with contextlib.suppress(Exception):
            torch.cuda.init()
    finally:
        steps["@cuda_ready"] = time.perf_counter() - origin
        if cuda_ready is not None:
            cuda_ready.set()
    done("warm_ctx")
    given: queue.SimpleQueue = queue.SimpleQueue()  # the handoff's item, passed on by the torch thread
    torch_ops = None
    if parallel:
        torch_ops = threading.Thread(target=_warm_torch_ops, args=(dev, handoff, given, steps, origin),
                                     name="orcd-warm-torch", daemon=True)
        torch_ops.start()
    else:  # the same work, here and first
        _warm_torch_ops(dev, handoff, given, steps, origin)
    done("warm_cublas")
    tri.join()
    done("warm_triton_wait")
    item = given.get()
    if item is not None:
        f, cfg, dtype = item
        with torch.inference_mode(), contextlib.suppress(Exception):
            steps["warm_products"] = _warm_products(f, cfg.vocab_size, dev, dtype)
        done("warm_forward")
    if torch_ops is not None:
        torch_ops.join()
        done("warm_torch_wait")
    return steps


def _warm_cublas(dev: torch.device) -> None:
    with contextlib.suppress(Exception):
        a = torch.ones(16, 16, device=dev, dtype=torch.bfloat16)
        a @ a  # no sync (.item()): a thread that releases the GIL waits for it behind the tokenizer's build


def _warm_torch_ops(dev: torch.device, handoff: queue.SimpleQueue | None, given: queue.SimpleQueue,
                    steps: dict[str, float], origin: float) -> None:
    """cuBLAS, then (once the main thread hands over) the torch layer ops, beside the Triton import and
    products: torch releases the GIL while an op runs, so their lazy module loads overlap the Python
    work of the other threads. Passes the handoff's item on through `given` (always, even on error)."""
    t = time.perf_counter()
    item = None
    try:
        _warm_cublas(dev)
        item = handoff.get() if handoff is not None else None
    finally:
        given.put(item)
    if item is not None:
        f, cfg, dtype = item
        with torch.inference_mode(), contextlib.suppress(Exception):
            steps["warm_layers"] = float(_warm_layers(f, cfg, dev, dtype))
    now = time.perf_counter()
    steps["warm_torch"], steps["@warm_torch"] = now - t, now - origin
