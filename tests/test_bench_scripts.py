"""The bench scripts stay runnable: each one under bench/ (and the GGUF fuzzer beside its harness) imports
what it uses and answers `--help` on the CPU; the tensor-parallel bench and the fuzzer also run end to end
at a tiny size. The benchmarks themselves need a GPU and minutes, so CI checks only that they start."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def _is_script(path: Path) -> bool:
    return 'if __name__ == "__main__":' in path.read_text()


SCRIPTS = sorted(p.relative_to(REPO).as_posix() for p in BENCH.rglob("*.py")
                 if "results" not in p.parts and _is_script(p))
SCRIPTS.append("tests/gguf/fuzz_gguf.py")


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, as in CI, even on a GPU host
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """`python SCRIPT --help` for every script, a few at a time (each pays for its torch import)."""
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(zip(SCRIPTS, pool.map(lambda s: _run([s, "--help"]), SCRIPTS), strict=True))


def test_bench_is_grouped():
    """Benchmarks live in folders named for what they measure; none flat in bench/."""
    assert sorted(p.name for p in BENCH.glob("*.py")) == []
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(helps, script):
    res = helps[script]
    assert res.returncode == 0, f"python {script} --help exited {res.returncode}:\n{res.stderr[-3000:]}"
    assert "usage:" in res.stdout


def test_fuzz_gguf_runs(tmp_path):
    out = tmp_path / "fuzz.json"
    res = _run(["tests/gguf/fuzz_gguf.py", "--cases", "25", "--json", str(out)])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert '"cases": 25' in out.read_text()


@pytest.mark.slow
def test_tp_scaling_runs_on_cpu(tmp_path, tiny_qwen2_gguf):
    """bench/tp/tp_scaling.py end to end on gloo: 2 ranks of the tiny file."""
    res = _run(["bench/tp/tp_scaling.py", "--device", "cpu", "--file", str(tiny_qwen2_gguf), "--ranks", "2",
                "--prompt-len", "16", "--decode-tokens", "4", "--out", str(tmp_path)], timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    table = (tmp_path / "tp.md").read_text()
    assert "| 2 | cpu |" in table


def test_attn_split_report_from_the_committed_sweeps():
    """The sweep's report reads session 35's rows with no GPU: both launch rules' rows are found there."""
    sweeps = REPO / "bench/results/s35/attn_split"
    r = _run(["bench/kernels/attn_split.py", "--report", str(sweeps / "attn_05b.json"),
              str(sweeps / "attn_7b.json")])
    assert r.returncode == 0, r.stderr
    assert "| 0.5b B=64 ctx 4096 | 65.1 | 46.3 | 0.71 |" in r.stdout
    assert "| 7b B=64 ctx 4096 | 169.2 | 169.2 | 1.00 |" in r.stdout
