"""What the engine sizes at start: the KV pool (from free memory, or tokens on the CPU), the dense weight
copies of --dense-batch-rows (and whether `auto` makes them), and the attention layers' windows (for
releasing blocks out of them)."""

from __future__ import annotations

from typing import Any

CPU_KV_TOKENS = 32768  # on the CPU there is no free memory to measure: size the pool in tokens
# --dense-batch-rows auto: copies of at most AUTO_DENSE_SHARE of the device's memory are made without being
# asked, for batches of >= AUTO_DENSE_ROWS. H100, the 0.5B Q4_K_M synth (+0.92 GiB; bench/results/
# dense_auto_05b_h100.md), engine tok/s off -> on from 2 rows: 1,648 -> 1,465 at 2 streams (the GEMV wins),
# 2,091 -> 2,952 at 4, 4,271 -> 5,840 at 8, 16,127 -> 21,288 at 32, 29,375 -> 39,055 at 64. A 7B's copies
# (13.2 GiB, 16 % of an H100) stay opt-in: they cost 3 % at 8 streams (docs/performance.md, session 10).
AUTO_DENSE_ROWS = 4
AUTO_DENSE_SHARE = 0.05


def auto_dense_rows(loaded, max_num_seqs: int, graphs: bool, device_memory: int | None = None) -> int | None:
    """--dense-batch-rows auto: AUTO_DENSE_ROWS when the fused step's CUDA decode graphs would read the
    copies (graphs, on a CUDA device) and the copies take at most AUTO_DENSE_SHARE of the device's memory
    (device_memory bytes; None: CUDA's total for loaded.device); else None (off)."""
    import torch

    device = torch.device(loaded.device)
    if not graphs or max_num_seqs < AUTO_DENSE_ROWS or (device.type != "cuda" and device_memory is None):
        return None
    from orcd.runner.fused_decode import dense_need

    need = dense_need(loaded.model)  # None: a model the fused step does not run
    if device_memory is None:
        device_memory = torch.cuda.get_device_properties(device).total_memory
    return AUTO_DENSE_ROWS if need is not None and need <= AUTO_DENSE_SHARE * device_memory else None


def dense_copies(loaded, rows: int | str | None, max_num_seqs: int, graphs: bool):
    """The dense weight copies of --dense-batch-rows (orcd.runner.dense_weights), made now, or None (rows
    None, or "auto" deciding against them: auto_dense_rows); OrcdError (DenseCopiesError) for a bad rows, no
    CUDA decode graphs, a model without the fused step, no room."""
    from orcd.runner.dense_weights import DenseCopiesError, check_engine_dense

    if rows == "auto":
        rows = auto_dense_rows(loaded, max_num_seqs, graphs)
    if rows is None:
        return None

    check_engine_dense(rows, max_num_seqs, loaded.device, graphs)
    from orcd.runner.fused_decode import dense_copies as make

    try:
        return make(loaded.model, rows)
    except DenseCopiesError:
        raise
    except ValueError as err:  # the model's blocks are not the fused step's
        raise DenseCopiesError(f"--dense-batch-rows: {err}") from err


def auto_num_blocks(loaded, kv_fraction: float, block_size: int) -> int:
    """CUDA: blocks in kv_fraction of the free device memory; CPU: CPU_KV_TOKENS (or one context)."""
    from orcd.models.kv_cache import num_blocks_for

    cpu_tokens = max(CPU_KV_TOKENS, loaded.cfg.context_length)
    return num_blocks_for(loaded.cfg, block_size, loaded.dtype, loaded.device, fraction=kv_fraction,
                          cpu_tokens=cpu_tokens)


def layer_windows(model: Any) -> list[int]:
    """Each attention layer's sliding window (0 = full attention); [] for a model without such layers."""
    from torch import nn

    from orcd.models.layers.attention import Attention

    if not isinstance(model, nn.Module):
        return []
    return [m.window for m in model.modules() if isinstance(m, Attention)]
