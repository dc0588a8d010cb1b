"""A device out-of-memory inside one model step (issue 8 item 5), end to end: the real engine and the real
app on loopback (in-process uvicorn, so the fault can be injected: a CPU run cannot run out of device
memory on demand). The runner raises torch.OutOfMemoryError in one step holding two streams; exactly
those two end with an `error` event naming the OOM, a request waiting in the queue meanwhile runs to its
normal end, the server keeps serving, and every KV block is free afterwards."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import torch
import uvicorn
from live_server import free_port, tiny_model

from orcd.engine.async_engine import AsyncEngine
from orcd.engine.llm_engine import LLMEngine
from orcd.loading.loader import load_model
from orcd.server import ServerSettings, create_app


class OOMOnce:
    """Wraps the real runner's execute and launch (a decode step the engine overlaps with the next goes
    through launch): once armed, the next step with two sequences raises OOM."""

    def __init__(self, runner):
        self.execute_real, self.launch_real = runner.execute, runner.launch
        self.armed = threading.Event()
        self.fired_on: list[int] = []

    def fire(self, sched) -> None:
        if self.armed.is_set() and len(sched.seqs) == 2:
            self.armed.clear()
            self.fired_on = [s.seq_id for s in sched.seqs]
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")

    def execute(self, sched):
        self.fire(sched)
        return self.execute_real(sched)

    def launch(self, sched, prev=None):
        self.fire(sched)
        return self.launch_real(sched, prev)


@pytest.fixture(scope="module")
def oom_server(tmp_path_factory):
    loaded = load_model(tiny_model(tmp_path_factory.mktemp("oom") / "oom.gguf"), device="cpu")
    llm = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=2)
    fault = OOMOnce(llm.runner)
    llm.runner.execute, llm.runner.launch = fault.execute, fault.launch
    app = create_app(AsyncEngine(llm), ServerSettings(warmup=False, max_queue=4, ping_interval_s=1.0))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    yield f"http://127.0.0.1:{server.config.port}", fault
    server.should_exit = True
    thread.join(30)


def _stream(url: str, rid: str, max_tokens: int, out: dict) -> None:
    events = []
    body = {"prompt": rid, "max_tokens": max_tokens, "ignore_eos": True, "request_id": rid}
    with httpx.stream("POST", url + "/v1/generate", json=body, timeout=120) as r:
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    out[rid] = events


def _health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=30).json()


def _wait(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_oom_in_a_step_fails_only_that_steps_requests(oom_server):
    url, fault = oom_server
    out: dict[str, list] = {}
    streams = [threading.Thread(target=_stream, args=(url, rid, n, out))
               for rid, n in (("a", 1500), ("b", 1500))]
    for t in streams:
        t.start()
    _wait(lambda: _health(url)["running"] == 2)
    queued = threading.Thread(target=_stream, args=(url, "c", 8, out))
    queued.start()
    _wait(lambda: _health(url)["waiting"] == 1)
    fault.armed.set()
    for t in (*streams, queued):
        t.join(120)
    assert len(fault.fired_on) == 2
    for rid in ("a", "b"):
        kinds = [e for e, _ in out[rid]]
        assert kinds[0] == "started" and kinds[-1] == "error" and "end" not in kinds, (rid, kinds[-3:])
        assert out[rid][-1][1]["code"] == "generation_failed"
        assert "OutOfMemoryError" in out[rid][-1][1]["message"]
    end = out["c"][-1]
    assert end[0] == "end" and end[1]["stop_reason"] == "length" and end[1]["tokens_out"] == 8
    r = httpx.post(url + "/v1/generate", json={"prompt": "after", "max_tokens": 4, "ignore_eos": True,
                                               "stream": False}, timeout=60)
    assert r.status_code == 200 and r.json()["tokens_out"] == 4
    h = _health(url)
    assert h["status"] == "ok" and (h["active_requests"], h["running"], h["kv_blocks_used"]) == (0, 0, 0)
