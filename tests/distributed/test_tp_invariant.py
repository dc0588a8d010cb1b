"""Batch-invariant mode under tensor parallelism: the policy reaches every rank, and the row-parallel
sums add in rank order (the same bits for a row whatever the batch)."""

from __future__ import annotations

import json

import torch
from gguf import GGMLQuantizationType as Q
from tp_workers import ordered_sum_rank, seeded_rank

from orcd.distributed.layers import RowParallelLinear
from orcd.distributed.runtime import launch
from orcd.gguf.synth import write_model_gguf
from orcd.numerics import batch_invariant_mode, invariant_layers
from orcd.quant import QuantLinear

PROMPTS = [[1, 17, 42, 99, 7, 3, 250, 61, 8, 12, 5, 77, 300, 2, 90, 44, 19], [5, 6, 7, 8, 9, 10, 11],
           [200, 201, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]]


def test_row_parallel_linear_is_switched_by_batch_invariant_mode():
    inner = QuantLinear(4, 8, Q.F32, torch.float32, weight=torch.zeros(4, 8))
    model = torch.nn.Sequential(RowParallelLinear(inner, None))
    layers = invariant_layers(model)
    assert model[0] in layers and inner in layers
    with batch_invariant_mode(layers, True):
        assert model[0].batch_invariant and inner.batch_invariant
    assert not model[0].batch_invariant


def test_ordered_all_reduce_adds_in_rank_order(tmp_path):
    out = tmp_path / "sum.json"
    assert launch(3, "cpu", ordered_sum_rank, (str(out),), threads=1) == 0
    got = json.loads(out.read_text())
    base = torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8) / 7
    want = (0.1 + base) + (0.2 + base) + (0.30000000000000004 + base)
    assert torch.equal(torch.tensor(got["full"]), want)
    assert got["one"] == got["full"][:1]


def test_seeded_request_is_the_same_alone_and_batched_at_two_ranks(tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=321, hidden=64, n_layers=2, ffn=96,
                            n_heads=4, n_kv_heads=2, context_length=256, qtypes={"default": Q.Q8_0}, seed=3)
    out = tmp_path / "seeded.json"
    assert launch(2, "cpu", seeded_rank, (str(path), PROMPTS, str(out)), threads=1) == 0
    got = json.loads(out.read_text())
    assert got["policy"] == "seeded" and len(got["alone"]) == 24
    assert got["batched"] == got["alone"]
