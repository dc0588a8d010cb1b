"""`orcd serve --tensor-parallel 2` on the CPU: the 1-rank completion, then a clean SIGTERM shutdown."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
from gguf import GGMLQuantizationType as Q

from orcd.distributed.runtime import free_port
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

PROMPT = "Hello there"


def one_rank_text(path, max_tokens: int) -> str:
    loaded = load_model(path, "cpu")
    engine = LLMEngine(loaded, num_kv_blocks=64)
    ids = loaded.tokenizer.encode_prompt(PROMPT)
    engine.add_request(EngineRequest("t", ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)))
    text = ""
    while engine.has_work():
        text += "".join(ev.text for ev in engine.step())
    return text


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 150.0) -> None:
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


def test_two_rank_server_answers_like_one_rank_and_stops_on_sigterm(tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=320, hidden=64, n_layers=2, ffn=128,
                            n_heads=4, n_kv_heads=1, context_length=256, qtypes={"default": Q.Q8_0}, seed=5)
    port = free_port()
    argv = [sys.executable, "-m", "orcd", "serve", "--model", str(path), "--device", "cpu",
            "--tensor-parallel", "2", "--port", str(port), "--num-kv-blocks", "64", "--log-level", "warning"]
    log = open(tmp_path / "serve.log", "w+")  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        r = httpx.post(url + "/v1/completions", timeout=60,
                       json={"model": "m", "prompt": PROMPT, "max_tokens": 12, "temperature": 0})
        assert r.status_code == 200, r.text
        got = r.json()["choices"][0]["text"]
        assert got == one_rank_text(path, 12) and got != ""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0  # every rank released and joined
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
