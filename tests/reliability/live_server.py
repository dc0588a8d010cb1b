"""A real `orcd serve` subprocess on a free loopback port, for the reliability tests and
bench/serving/soak.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from serve_proc import ServeProcess, free_port  # noqa: F401 (free_port re-exported)

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


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LiveServer(ServeProcess):
    """A CPU server without an API key, with `num_kv_blocks` blocks of KV cache."""

    def __init__(self, model: Path, log_path: Path, *extra: str, num_kv_blocks: int = 512):
        super().__init__(model, log_path, "--device", "cpu", "--num-kv-blocks", str(num_kv_blocks), *extra,
                         env={"ORCD_API_KEY": None})
        self.model_id = model.stem

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
