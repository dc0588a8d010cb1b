"""One real `orcd serve` subprocess (tiny random GGUF, loopback, free port) shared by the server tests, and
clients of it: httpx (`client`), the official openai (`oai`) and anthropic (`claude`) SDKs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
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


@pytest.fixture()
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0, timeout=60)


@pytest.fixture()
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=server.api_key, max_retries=0, timeout=60)
