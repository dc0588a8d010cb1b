"""The all-reduce choice of the TP fused decode step (orcd.distributed.symm_allreduce) on the CPU: "nccl"
means the collective itself, an unknown kind is refused, and "symm" falls back where symmetric memory
cannot run (off CUDA). The one-shot kernel's sums are checked on GPUs (test_tp_nccl_gpu.py,
bench/tp/allreduce_latency.py)."""

from __future__ import annotations

import pytest
import torch

from orcd.distributed.symm_allreduce import make_all_reduce


def test_nccl_kind_means_the_collective_itself():
    assert make_all_reduce("nccl", 64, torch.bfloat16, torch.device("cpu")) is None


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="multimem"):
        make_all_reduce("multimem", 64, torch.bfloat16, torch.device("cpu"))


def test_symm_off_cuda_falls_back_with_a_warning(caplog):
    with caplog.at_level("WARNING"):
        assert make_all_reduce("symm", 64, torch.bfloat16, torch.device("cpu")) is None
    assert "needs CUDA" in caplog.text
