"""bench/peers/kernel_table.py, the profiler table of the step-profile benches: CUDA kernels grouped by
name per unit, slowest first, shares of the total; CPU events and empty kernels left out. The events are
built by hand (a CUDA profile needs a GPU): the fields it reads are FunctionEvent's."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "peers"))
import kernel_table  # noqa: E402

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


class _Profile:
    def __init__(self, *events: tuple[str, object, float]):
        self._events = [SimpleNamespace(name=n, device_type=d, device_time_total=t) for n, d, t in events]

    def events(self):
        return self._events


def test_kernels_grouped_per_unit_slowest_first(capsys):
    gemv = "gemv_kernel_long_name"
    prof = _Profile((gemv, CUDA, 30.0), ("norm", CUDA, 10.0), (gemv, CUDA, 30.0), ("aten::add", CPU, 500.0),
                    ("idle", CUDA, 0.0))
    total, rows = kernel_table.kernel_rows(prof, 2, "token", 8)
    assert total == 35.0  # 70 µs of kernels over 2 tokens
    assert rows == [{"kernel": "gemv_ker", "calls_per_token": 1.0, "us_per_token": 30.0, "share": 60 / 70},
                    {"kernel": "norm", "calls_per_token": 0.5, "us_per_token": 5.0, "share": 10 / 70}]
    kernel_table.print_rows(rows, "token", 1, 4)
    assert capsys.readouterr().out == "     30.0 us    1.0x  85.7%  gemv\n"


def test_no_cuda_kernels_gives_an_empty_table():
    total, rows = kernel_table.kernel_rows(_Profile(("aten::mm", CPU, 9.0)), 4, "step", 100)
    assert (total, rows) == (0.0, [])

