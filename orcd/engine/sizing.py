"""What the engine sizes at start: the KV pool (from free memory, or tokens on the CPU), the dense weight
copies of --dense-batch-rows, and the attention layers' windows (for releasing blocks out of them)."""

from __future__ import annotations

from typing import Any

CPU_KV_TOKENS = 32768  # on the CPU there is no free memory to measure: size the pool in tokens


def dense_copies(loaded, rows: int, max_num_seqs: int, graphs: bool):
    """The dense weight copies of --dense-batch-rows (orcd.runner.dense_weights), made now; OrcdError
    (DenseCopiesError) for a bad rows, no CUDA decode graphs, a model without the fused step, no room."""
    from orcd.runner.dense_weights import DenseCopiesError, check_engine_dense

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
