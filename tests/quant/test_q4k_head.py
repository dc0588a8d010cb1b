"""The int8 GEMVs' Q4_K reads in int32 words (q4k_head.py) give the previous byte/halfword reads' values
and outputs bit for bit (interp_q4k_head.py under the Triton interpreter); the check fails when they
differ (test_check_catches_a_wrong_decode)."""

from __future__ import annotations

from pathlib import Path

from tests.gpu.interp_run import interpreter_only, run_under_interpreter

SCRIPT = Path(__file__).with_name("interp_q4k_head.py")
NAMES = ["head_values", "gemv_i8_m1", "glu_q4k_i8_m1", "gemv_i8_m2", "glu_q4k_i8_m2", "gemv3_i8_m2",
         "gemv_i8_m3", "glu_q4k_i8_m3", "glu_q4k_i8_bo32_m3", "gemv_i8_m4", "gemv_i8_m5", "glu_q4k_i8_m5",
         "gemv_i8_m6", "gemv_i8_m7", "gemv_i8_m8", "glu_q4k_i8_m8", "gemv3_i8_m8"]
# on a GPU: bench/kernels/q4k_head_ab.py compares the compiled kernels of two source trees


def _run(*args: str) -> list[list[str]]:
    return run_under_interpreter(SCRIPT, 300, *args)


@interpreter_only
def test_int32_head_reads_bit_identical():
    rows = _run()
    assert [r[0] for r in rows] == NAMES
    assert all(int(n) == 0 for _, n in rows), rows


@interpreter_only
def test_check_catches_a_wrong_decode():
    """The script with the new reads decoding the neighbouring chunk's scales: every check differs (so the
    swap to the previous reads took effect, and a wrong decode does not pass)."""
    rows = _run("--wrong-chunk", "--rows", "2")  # every kernel, M = 1 and 2
    assert [r[0] for r in rows] == NAMES[:6]
    assert all(int(n) > 0 for _, n in rows), rows
