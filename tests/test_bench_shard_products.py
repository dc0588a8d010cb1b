"""bench/kernels/mmq_cuda.py --tp: one tensor-parallel rank's slices of the 7B's products."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench/kernels"), str(ROOT / "bench/peers")]

from mmq_cuda import shard_products  # noqa: E402
from products import P7B  # noqa: E402


def test_column_parallel_rows_and_row_parallel_inputs_are_cut():
    assert shard_products(P7B, 1) == P7B
    got = {name.split()[0] + f" {qt.name}": (n, k) for name, qt, n, k, _ in shard_products(P7B, 2)}
    assert got["q Q4_K"] == (1792, 3584) and got["o Q4_K"] == (3584, 1792)  # q/o split in two
    assert got["gate/up Q4_K"] == (9472, 3584) and got["down Q6_K"] == (3584, 9472)
    assert got["k/v Q4_K"] == (256, 3584) and got["lm_head Q6_K"] == (76032, 3584)
