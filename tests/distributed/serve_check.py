"""Drives a `orcd serve --tensor-parallel N` subprocess for the CPU (gloo) and GPU (NCCL) server tests:
streamed /v1/generate, cancel, a client-disconnect storm, then SIGTERM with no process left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from orcd.distributed.runtime import free_port


def start_server(path, device: str, world: int, log_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "orcd", "serve", "--model", str(path), "--device", device,
            "--tensor-parallel", str(world), "--port", str(port), "--num-kv-blocks", "64",
            "--log-level", "warning", "--shutdown-grace", "5", *extra]
    log = open(log_path, "w")  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, text=True)
    log.close()  # the child holds its own descriptor
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail("server did not become ready")


def events(lines):
    """(event, data) pairs of an SSE line iterator."""
    name = None
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:") and name is not None:
            yield name, json.loads(line[5:])
            name = None


def stream(url: str, prompt: str, max_tokens: int, **body) -> tuple[str, str]:
    """A streamed /v1/generate -> (text, stop_reason)."""
    text, reason = "", None
    with httpx.stream("POST", url + "/v1/generate", timeout=120,
                      json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                            **body}) as r:
        assert r.status_code == 200, r.read()
        for name, data in events(r.iter_lines()):
            if name == "token":
                text += data["t"]
            elif name in ("end", "error"):
                reason = data.get("stop_reason", f"error: {data}")
    return text, reason


def cancelled_mid_stream(url: str, prompt: str) -> str:
    """Start a long stream, cancel it after its first token by /v1/cancel; returns its stop_reason."""
    body = {"prompt": prompt, "max_tokens": 200, "ignore_eos": True, "temperature": 0, "request_id": "c1"}
    with httpx.stream("POST", url + "/v1/generate", timeout=120, json=body) as r:
        for name, data in events(r.iter_lines()):
            if name == "token" and data["i"] == 0:
                r2 = httpx.post(url + "/v1/cancel", json={"request_id": "c1"}, timeout=30)
                assert r2.status_code == 200, r2.text
            if name in ("end", "error"):
                return data.get("stop_reason", str(data))
    return "no end event"


def disconnect_storm(url: str, prompt: str, n: int) -> None:
    """n clients each start a long stream and hang up after its first token, all at once."""
    def client() -> None:
        body = {"prompt": prompt, "max_tokens": 200, "ignore_eos": True, "temperature": 0.7}
        with httpx.stream("POST", url + "/v1/generate", timeout=120, json=body) as r:
            for name, _ in events(r.iter_lines()):
                if name == "token":
                    return  # closing the response drops the connection

    threads = [threading.Thread(target=client) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)


def sigterm_leaves_no_process(proc: subprocess.Popen, timeout_s: float = 90.0) -> list[int]:
    """SIGTERM the launcher; asserts exit status 0 and returns the pids of its descendants (ranks,
    multiprocessing helpers) still alive 10 s after it exited (none expected)."""
    kids = psutil.Process(proc.pid).children(recursive=True)
    assert kids, "no rank processes found"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=timeout_s) == 0  # every rank released and joined
    _, alive = psutil.wait_procs(kids, timeout=10)
    return [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def check_server(proc: subprocess.Popen, url: str, prompt: str, want: str, max_tokens: int) -> None:
    """The whole server scenario; `want` is the one-rank greedy text of `prompt` (max_tokens tokens,
    ignore_eos)."""
    try:
        wait_ready(url, proc)
        got, reason = stream(url, prompt, max_tokens)
        assert (got, reason) == (want, "length") and got != ""
        assert cancelled_mid_stream(url, prompt) == "cancelled"
        disconnect_storm(url, prompt, 16)
        assert stream(url, prompt, max_tokens) == (want, "length")  # still serving, same answer
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        orphans = sigterm_leaves_no_process(proc)
        assert orphans == [], f"processes left after SIGTERM: {orphans}"
    finally:
        if proc.poll() is None:
            for p in psutil.Process(proc.pid).children(recursive=True):
                p.kill()
            proc.kill()
            proc.wait()
