"""One real `orcd serve` of the demo model (orcd/assets/demo.gguf: a 3k-token Qwen-style vocabulary and
the Qwen2.5 chat template, so forced tool calls take the Hermes `<tool_call>` format) on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serve_proc import ServeProcess

from orcd.hub import DEMO_MODEL_PATH

API_KEY = "sk-orcd-structured-test"


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("structured") / "serve.log"
    srv = ServeProcess(DEMO_MODEL_PATH, log, "--device", "cpu", "--num-kv-blocks", "1024", "--max-num-seqs",
                       "32", env={"ORCD_API_KEY": API_KEY})
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def oai(demo_server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=demo_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
