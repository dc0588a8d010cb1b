"""Server test helpers: a real `orcd serve` subprocess on a free loopback port, a strict SSE reader."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from serve_proc import ServeProcess, free_port  # noqa: F401 (free_port re-exported)

CONTEXT = 32768
TINY = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=CONTEXT)
KV_BLOCKS = 4096  # x 16 tokens: every test's streams fit without preemption (tiny model: 32 MiB)
API_KEY = "sk-orcd-test-7f3a9c"
LONG = 30000  # max_tokens for "still running" streams: minutes of decoding, far more than a test waits


class ServerProc(ServeProcess):
    """A CPU server on the tiny model, protected by API_KEY unless api_key=None."""

    def __init__(self, model: Path, log_path: Path, *extra: str, api_key: str | None = API_KEY):
        super().__init__(model, log_path, "--device", "cpu", "--num-kv-blocks", str(KV_BLOCKS), *extra,
                         env={"ORCD_API_KEY": api_key or ""})
        self.api_key = api_key

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def sse_blocks(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """Strict SSE reader: yields (event, data) per block, ("comment", text) for `:` lines.
    Fails on any line that is not `event:`, `data:` or a comment, and on a stream cut mid-block."""
    buf = b""
    for chunk in response.iter_bytes():
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            event, data = "message", []
            for line in block.decode("utf-8").split("\n"):
                if line.startswith(":"):
                    yield "comment", line[1:].strip()
                elif line.startswith("event: "):
                    event = line[len("event: "):]
                elif line.startswith("data: "):
                    data.append(line[len("data: "):])
                else:
                    raise AssertionError(f"bad SSE line {line!r}")
            if data:
                yield event, "\n".join(data)
    assert buf == b"", f"stream ended mid-event: {buf!r}"


def generate_events(response: httpx.Response, pings: list | None = None) -> Iterator[tuple[str, dict]]:
    """(event, json) of a /v1/generate stream; comments go to `pings` when given."""
    for event, data in sse_blocks(response):
        if event == "comment":
            if pings is not None:
                pings.append(data)
            continue
        yield event, json.loads(data)


def wait_idle(client: httpx.Client, timeout: float = 20.0) -> dict:
    """Poll /health until no request is active and no KV block is held; return the last body."""
    deadline = time.monotonic() + timeout
    health = {}
    while time.monotonic() < deadline:
        health = client.get("/health").json()
        if health["active_requests"] == 0 and health["kv_blocks_used"] == 0 and health["running"] == 0:
            return health
        time.sleep(0.05)
    raise AssertionError(f"server did not go idle: {health}")


def metric(text: str, sample: str) -> float:
    """Value of one Prometheus sample (`name{labels}` exactly as exposed), 0 when absent."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0
