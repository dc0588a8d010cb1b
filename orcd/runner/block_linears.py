"""One block's linears as the decode step's kernels read them (BlockLinears; under TP a rank's slices),
their Q6_K layout, and the checks that the fused step (decode_products.py, fused_decode.py, the
tensor-parallel fused_tp.py) can run a model's blocks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orcd.quant.kernels import get_fused_linear


@dataclass(frozen=True)
class BlockLinears:
    """One block's QuantLinears as the kernels read them (under TP: this rank's slices)."""

    q: object
    k: object
    v: object
    o: object
    gate: object
    up: object
    down: object

    def all(self) -> tuple:
        return (self.q, self.k, self.v, self.o, self.gate, self.up, self.down)

    def qkv(self) -> tuple:
        return (self.q, self.k, self.v)


def split(m) -> bool:
    """m's raw Q6_K blocks are in the split layout (QuantLinear.layout; orcd/loading/q6k_layout.py)."""
    return getattr(m, "layout", "gguf") == "split"


def gguf_raw(m, kernel: str) -> torch.Tensor:
    """m.raw for a kernel that reads GGUF's blocks only: ValueError naming it for a split weight."""
    if split(m):
        raise ValueError(f"{kernel} does not read the split Q6_K layout (q6k_layout='split'): "
                         f"the int8 GEMVs (int8_x) do")
    return m.raw


def check_block_kind(model) -> None:
    """ValueError unless `model` says its blocks are the qwen2/llama block (`fused_decode`). Called
    before the blocks' linears are gathered: other blocks (gpt2, gpt-oss) have no gate/up to gather."""
    if not getattr(model, "fused_decode", True):  # e.g. gemma3, qwen3: blocks this step does not run
        raise ValueError(f"{model.cfg.arch} has no fused decode step")


def check_fusable(model, blocks: list[BlockLinears]) -> None:
    """ValueError unless the fused step runs `model`'s blocks: the qwen2/llama block, full-width rotary,
    a power-of-two head_dim, a fused kernel for every raw weight's type."""
    check_block_kind(model)
    rot, a0 = model.rotary, model.blocks[0].attn
    if rot.rope_dim != a0.head_dim or a0.head_dim & (a0.head_dim - 1):
        raise ValueError("fused decode needs full-width rotary and a power-of-two head_dim")
    for lin in blocks:
        for m in lin.all():
            if m.raw is not None and get_fused_linear(m.qtype, m.raw.device) is None:
                raise ValueError(f"no fused kernel for {m.qtype.name}")


def norm_fusable(blocks: list[BlockLinears], head) -> bool:
    """Every weight raw, gate/up of one type without bias, o/down without bias: the norm-fused step
    (norms inside the GEMVs that read them, residual adds inside the ones that write it) can run."""
    return all(m.raw is not None for lin in blocks for m in lin.all()) and head.raw is not None and all(
        lin.gate.qtype == lin.up.qtype and lin.gate.bias is None and lin.up.bias is None
        and lin.o.bias is None and lin.down.bias is None for lin in blocks)
