"""Importing orcd puts Intel MKL in its strict reproducible mode (MKL_CBWR=AUTO,STRICT) before the first CPU
matmul: without it, on an AVX-512 Xeon the batch-invariant CPU step's seeded logprobs moved by 1e-7 with
arrival order (test_invariant_arrival failed there, passed on AMD hosts)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
import torch

LIB = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
PROBE = """
import ctypes, os, sys
import orcd
import torch
lib = ctypes.CDLL(sys.argv[1])
a = torch.randn(64, 64)
(a @ a).sum()
lib.mkl_serv_cbwr_get.restype = ctypes.c_int
print(os.environ.get("MKL_CBWR"), lib.mkl_serv_cbwr_get(ctypes.c_int(-1)) & 0xFFFFFFFF)
"""


def _has_mkl_cbwr() -> bool:
    try:
        return hasattr(ctypes.CDLL(LIB), "mkl_serv_cbwr_get")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mkl_cbwr(), reason="torch's CPU library has no MKL (not x86, or another BLAS)")
def test_import_orcd_sets_mkl_strict_mode():
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    out = subprocess.run([sys.executable, "-c", PROBE, LIB], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "AUTO,STRICT"
    assert int(out[1]) & 0x10000  # MKL_CBWR_STRICT
    assert int(out[1]) & 0xFFFF == 2  # MKL_CBWR_AUTO: the host's own code branch


def test_a_users_mkl_cbwr_is_kept():
    env = {**os.environ, "MKL_CBWR": "COMPATIBLE"}
    code = "import os, orcd; print(os.environ['MKL_CBWR'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "COMPATIBLE"
