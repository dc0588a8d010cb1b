"""`orcd serve --tensor-parallel 2` on the CPU: streams the 1-rank completion, cancels, survives a
client-disconnect storm, and stops every rank on SIGTERM (tests/distributed/serve_check.py)."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q
from serve_check import check_server, start_server

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

PROMPT = "Hello there"
MAX_TOKENS = 12


def serve_model(tmp_path):
    return write_model_gguf(tmp_path / "m.gguf", "qwen2", vocab_size=320, hidden=64, n_layers=2, ffn=128,
                            n_heads=4, n_kv_heads=1, context_length=256, qtypes={"default": Q.Q8_0}, seed=5)


def one_rank_text(path, max_tokens: int, device: str = "cpu", dtype=None) -> str:
    loaded = load_model(path, device, dtype=dtype or torch.float32)
    engine = LLMEngine(loaded, num_kv_blocks=64, enforce_eager=True)
    ids = loaded.tokenizer.encode_prompt(PROMPT)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    engine.add_request(EngineRequest("t", ids, params))
    text = ""
    while engine.has_work():
        text += "".join(ev.text for ev in engine.step())
    return text


def test_two_rank_server_streams_cancels_and_stops_on_sigterm(tmp_path):
    path = serve_model(tmp_path)
    proc, url = start_server(path, "cpu", 2, tmp_path / "serve.log")
    check_server(proc, url, PROMPT, one_rank_text(path, MAX_TOKENS), MAX_TOKENS)


def test_ranks_end_when_the_launcher_is_killed(tmp_path):
    """SIGKILL to the launcher (no chance to clean up): every rank still ends (PR_SET_PDEATHSIG)."""
    import signal

    import psutil
    from serve_check import wait_ready

    proc, url = start_server(serve_model(tmp_path), "cpu", 2, tmp_path / "serve.log")
    kids = []
    try:
        wait_ready(url, proc)
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert len(kids) >= 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(kids, timeout=30)
        assert [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        for p in kids:
            if p.is_running():
                p.kill()
        if proc.poll() is None:
            proc.kill()
