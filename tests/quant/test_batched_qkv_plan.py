"""batched_qkv's host side on the CPU: which q/k/v sets it takes, and its split-K plan."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

pytest.importorskip("triton")

from orcd.quant.kernels.batched_qkv import (  # noqa: E402
    SPLIT_STEP,
    batched_qkv,
    qkv_one_launch,
    qkv_plan,
    qkv_routed,
)


def _w(qt: T, n: int, k: int, bias: bool = False):
    from orcd.quant.kernels.layout import row_bytes

    return (torch.zeros((n, row_bytes(qt, k)), dtype=torch.uint8), n, qt, torch.zeros(n) if bias else None)


def test_routed_sets():
    k = 3584
    assert qkv_routed([_w(T.Q4_K, 3584, k), _w(T.Q4_K, 512, k), _w(T.Q6_K, 512, k)], k)
    assert qkv_routed([_w(T.Q8_0, 896, 1024), _w(T.Q8_0, 128, 1024), _w(T.Q8_0, 128, 1024)], 1024)
    assert not qkv_routed([_w(T.Q4_K, 3584, k), _w(T.Q4_K, 512, k)], k)  # two weights
    q5k = (torch.zeros((512, 2464), dtype=torch.uint8), 512, T.Q5_K, None)
    assert not qkv_routed([q5k] * 3, k)  # no tile for Q5_K
    assert not qkv_routed([_w(T.Q8_0, 64, 896)] * 3, 896)  # K not a multiple of 256
    assert not qkv_routed([_w(T.Q4_K, 512, k, bias=True), _w(T.Q4_K, 512, k), _w(T.Q4_K, 512, k)], k)


def test_one_launch_past_32_rows_or_for_a_small_qkv():
    seven = [_w(T.Q4_K, 3584, 3584), _w(T.Q4_K, 512, 3584), _w(T.Q6_K, 512, 3584)]
    assert [qkv_one_launch(seven, m, 3584) for m in (5, 8, 32, 33, 64)] == [False, False, False, True, True]
    big = [_w(T.Q4_K, 8192, 8192), _w(T.Q4_K, 1024, 8192), _w(T.Q4_K, 1024, 8192)]  # the 72B on one GPU
    assert [qkv_one_launch(big, m, 8192) for m in (5, 8, 32, 33, 64)] == [False, False, False, True, True]
    rank4 = [_w(T.Q4_K, 2048, 8192), _w(T.Q4_K, 256, 8192), _w(T.Q4_K, 256, 8192)]  # a TP 4 rank's
    assert all(qkv_one_launch(rank4, m, 8192) for m in (5, 8, 32, 64))  # 2560 rows: one launch
    assert not qkv_one_launch(big[:2], 64, 8192)  # not routed at all: two weights


def test_plan_splits_7b_at_8_rows():
    # 7B q/k/v: (3584 + 512 + 512) / 64 = 72 tiles of one 16-row tile; 14 steps of 256: 4 per split
    bm, sps = qkv_plan(8, [3584, 512, 512], 3584, 64)
    assert (bm, sps) == (16, 4)
    assert sps * SPLIT_STEP < 3584
    assert qkv_plan(64, [3584, 512, 512], 3584, 64, target=1) == (64, 14)  # target 1: one range


def test_rejects_unrouted():
    with pytest.raises(ValueError):
        batched_qkv(torch.zeros(8, 896), [_w(T.Q8_0, 64, 896)] * 3, 896)
