"""A real `orcd serve` subprocess on a free loopback port, for the reliability tests and bench/soak.py."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from orcd.gguf.synth import write_model_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata

# 320-token vocab, 2 layers of 64: a forward pass is well under a millisecond of CPU per token.
TINY = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=2048)


def tiny_model(path: Path, chat_template: str | None = None, seed: int = 5) -> Path:
    """Tiny random qwen2 GGUF; `chat_template` replaces the synthetic vocabulary's template."""
    md: Mapping[str, Any] | None = None
    if chat_template is not None:
        md = {**synthetic_tokenizer_metadata(TINY["vocab_size"], "qwen2", seed),
              "tokenizer.chat_template": chat_template}
    return write_model_gguf(path, "qwen2", seed=seed, tokenizer_metadata=md, **TINY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LiveServer:
    def __init__(self, model: Path, log_path: Path, *extra: str, num_kv_blocks: int = 512):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model_id = model.stem
        self.log_path = log_path
        cmd = [sys.executable, "-m", "orcd.cli", "serve", "--model", str(model), "--port", str(self.port),
               "--device", "cpu", "--num-kv-blocks", str(num_kv_blocks), *extra]
        env = {k: v for k, v in os.environ.items() if k != "ORCD_API_KEY"}
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orcd serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"orcd serve not ready after {timeout} s:\n{self.log()}")

    async def wait_idle_async(self, c: httpx.AsyncClient, timeout: float = 30.0) -> dict:
        """Poll /health until nothing is active, running or waiting and no KV block is held.
        Returns the last /health body plus ok: bool."""
        deadline = time.monotonic() + timeout
        while True:
            h = (await c.get("/health")).json()
            idle = (h["active_requests"], h["running"], h["waiting"], h["kv_blocks_used"]) == (0, 0, 0, 0)
            if idle or time.monotonic() > deadline:
                return {"ok": idle, **{k: h[k] for k in ("status", "active_requests", "running", "waiting",
                                                          "kv_blocks_used", "kv_blocks_total")}}
            await asyncio.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed after 60 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
