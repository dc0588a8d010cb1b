"""The oldest Triton orcd's CUDA kernels compile with (MIN_TRITON, from tests/kernels_compile run against
older versions: 3.4 fails) is compared as numbers, not strings, and a load onto the CPU never asks."""

from __future__ import annotations

import pytest

from orcd.quant.kernels import MIN_TRITON, require_kernel_triton, triton_too_old


@pytest.mark.parametrize("version,old", [("3.4.0", True), ("3.2.0", True), ("2.3.1", True), ("3.5.0", False),
                                         ("3.6.0+git1a2b3c", False), ("3.10.1", False), ("4.0.0", False),
                                         ("nightly", True)])
def test_versions_older_than_the_minimum(version, old):
    assert MIN_TRITON == (3, 5)
    assert triton_too_old(version) is old


def test_a_cpu_load_does_not_need_triton():
    require_kernel_triton("cpu")  # no error whatever Triton is installed
