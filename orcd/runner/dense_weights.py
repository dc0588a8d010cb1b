"""Dense copies of the decode step's linears: memory for speed at large decode batches (opt-in).

On the H100 the 7B Q4_K_M products of 5..64-row batches run at 0.3-0.9 TB/s (dequantize in registers +
tl.dot: instruction-bound); the same products over dense bf16 weights through cuBLAS run near the copy
rate. DenseWeights holds, per block, q/k/v (one [q + k + v, H] matrix), o, gate/up (one [2F, H]
matrix: gate rows, then up rows), down, and the LM head, each dequantized once on the device by
QuantLinear.dense_weight (orcd.quant's dequantize, rounded to the model dtype: the same weights the mmq
float-w path rounds to bf16 before its dot). FusedDecoder(dense_rows=R) runs decode batches of >= R rows
on them.
Cost: 2 bytes a weight in bf16 (a 7B: ~7.1e9 weights, ~14 GB, beside its 4.4 GB of Q4_K_M blocks);
`nbytes` counts what the copies add (an o, down or head the model already holds dense is shared, not
copied; the stacked q/k/v and gate/up are always new). Per block the step launches one GEMM for q/k/v,
one for o, one for gate/up, one SwiGLU kernel and one GEMM for down.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orcd.errors import OrcdError
from orcd.quant.kernels.decode_ops import silu_mul
from orcd.runner.block_linears import BlockLinears


class DenseCopiesError(OrcdError, ValueError):
    """A dense_batch_rows the engine or the decoder cannot take; the message says why."""


def check_dense_rows(rows: object, max_rows: int | None = None) -> int:
    """`rows` as an int >= 1 (and <= max_rows, the largest decode batch, when given), else
    DenseCopiesError."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise DenseCopiesError(f"--dense-batch-rows must be a whole number >= 1, got {rows!r}")
    if max_rows is not None and rows > max_rows:
        raise DenseCopiesError(f"--dense-batch-rows {rows} exceeds the largest decode batch ({max_rows} "
                               "sequences, --max-num-seqs): the dense copies would never be used")
    return rows


def check_engine_dense(rows: object, max_num_seqs: int, device: torch.device, graphs: bool) -> int:
    """The engine's preconditions (DenseCopiesError): a good `rows`, and the fused step's CUDA decode
    graphs in use (the only step that reads the copies; eager steps run model.forward)."""
    check_dense_rows(rows, max_num_seqs)
    if torch.device(device).type != "cuda" or not graphs:
        raise DenseCopiesError("--dense-batch-rows is read by the fused decode step's CUDA graphs: it needs "
                               "a CUDA device, no --enforce-eager and --batch-invariant seeded or off")
    return rows


def _mm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x [N, in] @ w.T [in, out] (+ b [out]) -> [N, out], one cuBLAS call."""
    return torch.addmm(b, x, w.t()) if b is not None else torch.matmul(x, w.t())


@dataclass(frozen=True)
class DenseBlock:
    """One block's dense weights [out, in] in the model dtype, biases [out] or None."""

    qkv_w: tuple[torch.Tensor, torch.Tensor | None]  # [q + k + v, H]: q rows, then k rows, then v rows
    qkv_sizes: tuple[int, int, int]  # output rows of q, k, v
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: tuple[torch.Tensor, torch.Tensor | None]  # [2F, H]: gate rows 0..F-1, up rows F..2F-1
    down: tuple[torch.Tensor, torch.Tensor | None]

    def qkv(self, h: torch.Tensor) -> list[torch.Tensor]:
        """h [B, H] (normed) -> q, k, v [B, out_i]: column ranges of one product (one cuBLAS call instead
        of three), which RoPE + KV write and the attention read by their row stride."""
        return list(_mm(h, *self.qkv_w).split(self.qkv_sizes, dim=1))

    def o_proj(self, x: torch.Tensor) -> torch.Tensor:
        return _mm(x, *self.o)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """down(silu(h @ Wg.T) * (h @ Wu.T)), h [B, H] normed -> [B, H]: the gate/up product, one SwiGLU
        launch (decode_ops.silu_mul), the down product."""
        return _mm(silu_mul(_mm(h, *self.gate_up)), *self.down)


class DenseWeights:
    """The dense copies of a model's block linears and head; `rows`: the smallest batch they take."""

    def __init__(self, blocks: list[DenseBlock], head: tuple[torch.Tensor, torch.Tensor | None], rows: int,
                 nbytes: int):
        self.blocks, self.head, self.rows, self.nbytes = blocks, head, check_dense_rows(rows), nbytes

    @classmethod
    def build(cls, linears: list[BlockLinears], head, rows: int) -> DenseWeights:
        """Dequantize every linear once (on its device, in its dtype). Raises DenseCopiesError for a bad
        `rows` and torch.cuda.OutOfMemoryError when the copies do not fit (check_fits first says how much)."""
        check_dense_rows(rows)
        made = [0]  # bytes allocated here

        def dense(m) -> tuple[torch.Tensor, torch.Tensor | None]:
            if m.weight is not None:  # already dense in the model: shared
                return m.weight, m.bias
            w = m.dense_weight()
            made[0] += w.numel() * w.element_size()
            return w, m.bias

        blocks = [DenseBlock(_stacked((lin.q, lin.k, lin.v), made),
                             (lin.q.out_features, lin.k.out_features, lin.v.out_features), dense(lin.o),
                             _stacked((lin.gate, lin.up), made), dense(lin.down)) for lin in linears]
        return cls(blocks, dense(head), rows, made[0])

    def takes(self, batch: int) -> bool:
        return batch >= self.rows

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [B, H] after the final norm -> [B, V] float32."""
        return _mm(h, *self.head).float()


def _stacked(parts: tuple, made: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The linears `parts` (one input width) as one [sum of out, in] matrix, their rows in order (+ one
    bias, zeros where a part has none)."""
    first = parts[0]
    dtype, k = first.dtype, first.in_features
    dev = (first.raw if first.raw is not None else first.weight).device
    outs = [m.out_features for m in parts]
    w = torch.empty((sum(outs), k), dtype=dtype, device=dev)
    for dst, m in zip(w.split(outs), parts, strict=True):
        dst.copy_(m.dense_weight())  # one part's fresh copy at a time beside w
    made[0] += w.numel() * w.element_size()
    if all(m.bias is None for m in parts):
        return w, None
    b = torch.zeros(w.shape[0], dtype=dtype, device=dev)
    for part, m in zip(b.split(outs), parts, strict=True):
        if m.bias is not None:
            part.copy_(m.bias)
    return w, b


def dense_nbytes(linears: list[BlockLinears], head, dtype: torch.dtype) -> int:
    """What DenseWeights.build would allocate, in bytes (q/k/v and gate/up, stacked, always copied; o,
    down and the head when raw)."""
    size = torch.empty((), dtype=dtype).element_size()
    total = 0
    for lin in linears:
        total += sum(m.out_features * m.in_features for m in (lin.o, lin.down) if m.weight is None)
        total += sum(m.out_features * m.in_features for m in (lin.q, lin.k, lin.v, lin.gate, lin.up))
    if head.weight is None:
        total += head.out_features * head.in_features
    return total * size


def check_fits(need: int, device: torch.device) -> None:
    """DenseCopiesError, saying the sizes, unless `need` bytes are free on a CUDA device (no check on
    the CPU)."""
    if device.type != "cuda":
        return
    free, _total = torch.cuda.mem_get_info(device)
    if need > free:
        raise DenseCopiesError(f"the dense decode copies need {need / 2**30:.2f} GiB, the device has "
                         f"{free / 2**30:.2f} GiB free: lower the model's memory or drop --dense-batch-rows")
