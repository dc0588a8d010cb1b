"""split_k.py's host side on the CPU: the split plan covers K exactly once in whole steps and reaches
about the target programs; partials and counters are shaped as the kernels index them. (The kernels'
split and reduce paths run under the interpreter in tests/gpu/interp_batched.py and interp_mmq.py.)"""

from __future__ import annotations

import pytest
import torch

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")


def test_row_tile_is_a_power_of_two_from_16_to_64():
    from orcd.quant.kernels.split_k import row_tile

    assert [row_tile(m) for m in (1, 5, 16, 17, 33, 64, 65, 500)] == [16, 16, 16, 32, 64, 64, 64, 64]


@pytest.mark.parametrize("steps,m,n,bn", [(14, 8, 512, 64), (74, 64, 3584, 128), (3, 17, 1000, 16),
                                          (1, 5, 77, 64), (14, 8, 152064, 64)])
@pytest.mark.parametrize("target", [1, 4, 264])
def test_splits_cover_k_once_and_fill_the_target(steps, m, n, bn, target):
    import triton

    from orcd.quant.kernels.split_k import row_tile, steps_per_split

    bm = row_tile(m)
    sps = steps_per_split(steps, m, n, bm, bn, target)
    splits = triton.cdiv(steps, sps)  # as the launchers count them
    assert 1 <= sps <= steps and (splits - 1) * sps < steps <= splits * sps  # no empty split
    tiles = triton.cdiv(n, bn) * triton.cdiv(m, bm)
    if tiles >= target:
        assert splits == 1  # enough programs without splitting
    else:
        assert splits == steps or tiles * splits >= target // 2


def test_partials_and_counters():
    from orcd.quant.kernels.split_k import partials, split_counters

    y = torch.empty(3, 10, dtype=torch.bfloat16)
    assert partials(1, y) is None
    ws = partials(4, y)
    assert ws.shape == (4, 3, 10) and ws.dtype == torch.float32
    cnt = split_counters(torch.device("cpu"), 100)
    assert cnt.dtype == torch.int32 and cnt.numel() >= 100 and not cnt.any()
    assert split_counters(torch.device("cpu"), 50) is cnt  # one buffer, reused
    assert split_counters(torch.device("cpu"), (1 << 16) + 1).numel() == (1 << 16) + 1  # grown
