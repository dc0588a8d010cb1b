"""Hazard: "reported memory must be what the device says". `/health`'s device_memory is compared with
nvidia-smi's own count for the same card, with the engine in its own process and in the API process.

GPU only: needs CUDA and nvidia-smi. The counts are the whole device's, so other processes allocating
and freeing on it between the readings break the comparison: beside other pytest-xdist workers it is
skipped, and scripts/gpu_tests.sh runs it alone after the parallel part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from serve_proc import ServeProcess

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.gpu_exclusive,
    pytest.mark.skipif("PYTEST_XDIST_WORKER" in os.environ,
                       reason="whole-device memory counts: run alone (scripts/gpu_tests.sh)"),
]
MIB = 1 << 20
DEMO = Path(__file__).resolve().parents[2] / "orcd" / "assets" / "demo.gguf"


def _smi_used_total() -> tuple[int, int]:
    """(used, total) bytes of GPU 0 as nvidia-smi reports them (MiB resolution)."""
    out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.used,memory.total",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    used, total = (int(v) for v in out.stdout.strip().split(","))
    return used * MIB, total * MIB


@pytest.mark.skipif(not torch.cuda.is_available() or shutil.which("nvidia-smi") is None,
                    reason="needs CUDA and nvidia-smi")
@pytest.mark.parametrize("mode", ["--engine-process", "--no-engine-process"])
def test_health_device_memory_is_the_devices_count(tmp_path, mode):
    before, smi_total = _smi_used_total()
    srv = ServeProcess(DEMO, tmp_path / "serve.log", "--device", "cuda:0", mode, "--kv-fraction", "0.05")
    try:
        srv.wait_ready(timeout=300)
        body = httpx.get(srv.url + "/health", timeout=10).json()
        smi_used, _ = _smi_used_total()
    finally:
        srv.stop()
    mem = body["device_memory"]
    assert mem is not None, body
    assert mem["used_bytes"] == mem["total_bytes"] - mem["free_bytes"]
    # cudaMemGetInfo's total leaves out what the driver reserves; nvidia-smi's includes it (~0.5 GiB)
    assert 0.97 * smi_total <= mem["total_bytes"] <= smi_total
    # both are whole-device counts read moments apart: they agree to within the driver's reserve
    assert abs(mem["used_bytes"] - smi_used) <= 1024 * MIB, (mem, smi_used)
    # and the server's own weights and KV cache are inside what the device says is used
    ours = body["weights_bytes"] + body["kv_cache_bytes"]
    assert mem["used_bytes"] - before >= ours, (mem, before, ours)
