"""KV cache tensors: per layer K and V of [num_blocks, block_size, n_kv_heads, head_dim].

Which block belongs to which sequence is the block manager's business (plain Python); this file only
allocates the memory and sizes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orcd.errors import OrcdError
from orcd.gguf.config import ModelConfig


class KVCacheMemoryError(OrcdError):
    """The device has too little free memory for even a minimal KV cache."""


@dataclass
class KVCache:
    k: list[torch.Tensor]  # per layer [num_blocks, block_size, n_kv, head_dim]
    v: list[torch.Tensor]
    num_blocks: int
    block_size: int

    @classmethod
    def allocate(cls, cfg: ModelConfig, num_blocks: int, block_size: int, device: torch.device | str,
                 dtype: torch.dtype) -> KVCache:
        shape = (num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        return cls(k, v, num_blocks, block_size)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """K and V of every layer for block_size tokens."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * cfg.n_layers * block_size * cfg.n_kv_heads * cfg.head_dim * elem


def num_blocks_for(cfg: ModelConfig, block_size: int, dtype: torch.dtype, device: torch.device | str,
                   fraction: float = 0.9, cpu_tokens: int = 32768, max_tokens: int | None = None) -> int:
    """How many blocks to allocate.

    CUDA: `fraction` of the device's currently free memory (call after the weights are loaded).
    CPU: enough for `cpu_tokens` tokens. Either way capped at `max_tokens` when given.
    """
    device = torch.device(device)
    per_block = bytes_per_block(cfg, block_size, dtype)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        n = int(free * fraction) // per_block
    else:
        n = -(-cpu_tokens // block_size)
    if max_tokens is not None:
        n = min(n, -(-max_tokens // block_size))
    if n < 1:
        raise KVCacheMemoryError(
            f"no room for a KV cache: {per_block} bytes per {block_size}-token block, fraction {fraction}"
        )
    return n
