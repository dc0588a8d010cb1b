"""llama.cpp's side of the peer comparison: build llama-bench and llama-batched-bench, run them.

The sources are the llama.cpp copy vendored in the `llama-cpp-python` sdist, pruned and packed on the dev
machine (see bench/peers/README.md) into SRC_TAR; the build is CUDA for sm_90 only, the two targets only,
timed (nothing is cached between machines). Decode = llama-batched-bench's S_TG (B * 128 / T_TG) after
128-token prompts; 1 stream also from llama-bench tg128; prefill = llama-bench pp512. Flash attention on.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from pathlib import Path

SRC_TAR = ".peers/llama.cpp-src.tar.xz"
VERSION = "llama-cpp-python 0.3.36 sdist (vendored llama.cpp, ggml 0.25.3)"
TARGETS = ("llama-bench", "llama-batched-bench")


def built(work: Path) -> bool:
    """Both targets already built under work (an earlier call on the same warm machine)."""
    return all((work / "build" / "bin" / t).is_file() for t in TARGETS)


def start_build(src_tar: str, work: Path, jobs: int = 16) -> tuple[subprocess.Popen, float]:
    """Extract and start configure + build in the background (nice 19); returns (process, start time).
    Where both binaries exist already the process is a no-op (`true`)."""
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if built(work):
        return subprocess.Popen(["true"]), t0
    with tarfile.open(src_tar) as tf:
        tf.extractall(work, filter="data")
    src, bld = work / "llama.cpp", work / "build"
    cfg = ["cmake", "-S", str(src), "-B", str(bld), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
           "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
           "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
           "-DLLAMA_BUILD_APP=OFF"]
    build = ["cmake", "--build", str(bld), "-j", str(jobs), "--target", *TARGETS]
    cmd = " ".join(cfg) + " && " + " ".join(build)
    log = open(work / "build.log", "w")  # noqa: SIM115 - handed to the child, closed with it
    proc = subprocess.Popen(["nice", "-n", "19", "bash", "-c", cmd], stdout=log, stderr=subprocess.STDOUT)
    return proc, t0


def _run(cmd: list[str], timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a command that must succeed."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exit {p.returncode}: {p.stderr[-1500:]}")
    return p.stdout, p.stderr


def llama_bench(bin_dir: Path, model: str, timeout: float = 240) -> dict:
    """pp512 and tg128 tok/s (llama-bench's mean of 5 repetitions)."""
    out, _ = _run([str(bin_dir / "llama-bench"), "-m", model, "-p", "512", "-n", "128", "-ngl", "99",
                "-fa", "1", "-o", "json"], timeout)
    rows = json.loads(out[out.index("["):])
    res = {}
    for r in rows:
        key = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        res[key] = {"avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"]}
    res["build"] = {k: rows[0].get(k) for k in ("build_commit", "build_number", "gpu_info", "backends")}
    return res


def batched_bench(bin_dir: Path, model: str, streams: list[int], prompt: int = 128, gen: int = 128,
                  timeout: float = 300) -> dict:
    """Aggregate decode tok/s (S_TG) and prompt tok/s (S_PP) per number of parallel sequences."""
    ctx = max(streams) * (prompt + gen) + 256
    out, err = _run([str(bin_dir / "llama-batched-bench"), "-m", model, "-c", str(ctx), "-b", "2048",
                     "-ub", "512", "-ngl", "99", "-fa", "on", "-npp", str(prompt), "-ntg", str(gen),
                     "-npl", ",".join(map(str, streams)), "--output-format", "jsonl"], timeout)
    res = {}
    for line in (out + "\n" + err).splitlines():  # the table is logged to stdout (or stderr)
        if line.startswith("{") and "speed_tg" in line:
            r = json.loads(line)
            res[str(r["pl"])] = {"decode_tok_s": r["speed_tg"], "prompt_tok_s": r["speed_pp"],
                                 "t_tg": r["t_tg"]}
    return res
