"""Batch-invariant numerics: a per-layer setting the runner turns on for the steps that need it.

With it on, every row of a step (a token) is computed by the same kernels with the same reduction order
whatever else shares the step: how many rows, prefill or decode, which chunk of its prompt, whether it is
recomputed after preemption. So a seeded request returns the same tokens alone or among 64 others.

What changes on the CPU while it is on: QuantLinear runs its GEMM on fixed chunks of 16 rows (the CPU
GEMM's blocking, so its summation order, follows M); norms, attention and the rest are one code path per row.
A fixed shape is not enough on its own: Intel MKL's threaded AVX-512 GEMM sums in a varying order unless its
strict mode is on, which `import orcd` sets (orcd/__init__.py).
What changes on CUDA while it is on:
  - QuantLinear: a Triton tensor-core GEMM with one fixed tile shape for every M (dequantizing raw GGUF
    blocks in its K loop) instead of GEMVs for <= 4 rows and dequantize + cuBLAS above;
  - attention: one Triton kernel for prefill, chunked prefill and decode rows alike, each query row
    reducing over its keys in fixed 64-token blocks from position 0 (no split-K);
  - RMSNorm: a Triton kernel, one program per row;
  - decode CUDA graphs capture model.forward under these kernels (not the fused decode step).
Everything else a step does is elementwise, a gather, or per-row sampling, and invariant as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def invariant_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of `model` with a batch-invariant variant: those with a `batch_invariant` attribute
    (RMSNorm, Attention, QuantLinear), which their forward reads."""
    return [m for m in model.modules() if hasattr(m, "batch_invariant")]


def set_batch_invariant(layers: list[torch.nn.Module], on: bool) -> None:
    """Switch these layers (invariant_layers(model)) to their batch-invariant kernels, or back. Written
    to each instance's __dict__: nn.Module.__setattr__ costs ~7 us a layer, ~2 ms a step at 0.5B."""
    for m in layers:
        m.__dict__["batch_invariant"] = on


@contextmanager
def batch_invariant_mode(layers: list[torch.nn.Module], on: bool = True) -> Iterator[None]:
    """Run the enclosed forwards (and CUDA-graph captures) of these layers with their batch-invariant
    kernels when `on`; each layer's previous setting comes back after."""
    before = [m.batch_invariant for m in layers]
    set_batch_invariant(layers, on)
    try:
        yield
    finally:
        for m, b in zip(layers, before, strict=True):
            m.__dict__["batch_invariant"] = b


POLICIES = ("off", "seeded", "all")  # which steps of an engine run batch-invariant


def invariant_policy(value: str | bool) -> str:
    """Normalize an engine's batch_invariant option: "off" (never), "seeded" (steps holding a request
    with a seed, the default: its tokens do not depend on the batch, other steps keep the fast kernels),
    "all" (every step); True / False mean "all" / "off"."""
    if value is True or value is False:
        return "all" if value else "off"
    if value not in POLICIES:
        raise ValueError(f"batch_invariant must be one of {', '.join(POLICIES)}, got {value!r}")
    return value
