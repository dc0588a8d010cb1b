"""One real `orcd serve` subprocess (tiny random GGUF, loopback, free port) shared by the server tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import TINY, ServerProc

from orcd.gguf.synth import write_model_gguf


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return write_model_gguf(tmp_path_factory.mktemp("model") / "tiny-qwen2.gguf", "qwen2", seed=3, **TINY)


@pytest.fixture(scope="session")
def server(tiny_model, tmp_path_factory) -> Iterator[ServerProc]:
    # Two running slots + one queued: the third concurrent request waits, the fourth gets 503.
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("log") / "serve.log", "--max-num-seqs", "2",
                     "--max-queue", "1", "--ping-interval", "0.05", "--max-body-bytes", "65536")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        yield c
