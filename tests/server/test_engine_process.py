"""`orcd serve --engine-process`: the engine's step loop in a process of its own (orcd.engine.core_process).
Real servers on loopback: the same tokens as the in-process server, structured output (the grammar's
masks live in the engine process), cancel on disconnect, SIGTERM leaving no engine process behind, and
an engine process that dies giving an error event and 503s, not a hang. Tests run in file order."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import LONG, ServerProc, generate_events, wait_idle

BODY = {"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0.8, "seed": 5, "ignore_eos": True}


def engine_pids(server_pid: int) -> list[int]:
    """The server's engine processes: its children started by multiprocessing's spawn."""
    out = []
    for pid in Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split():
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"spawn_main" in cmd:
            out.append(int(pid))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _start(tiny_model, tmp_path_factory, name: str) -> ServerProc:
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("log") / f"{name}.log", "--engine-process",
                     "--max-num-seqs", "4", "--ping-interval", "0.05")
    srv.wait_ready()
    return srv


@pytest.fixture(scope="module")
def proc_server(tiny_model, tmp_path_factory) -> Iterator[ServerProc]:
    srv = _start(tiny_model, tmp_path_factory, "engine-process")
    try:
        yield srv
    finally:
        srv.stop()


def _tokens(srv: ServerProc, **body) -> list[int]:
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as c:
        with c.stream("POST", "/v1/generate", json={**BODY, **body}) as r:
            assert r.status_code == 200, r.read()
            return [d["id"] for e, d in generate_events(r) if e == "token"]


def test_same_tokens_as_in_process(proc_server, server):
    assert len(engine_pids(proc_server.pid)) == 1  # `server` is in-process unless ORCD_ENGINE_PROCESS=1
    assert _tokens(proc_server) == _tokens(server)
    assert len(_tokens(proc_server, max_tokens=5, temperature=0)) == 5


def test_structured_output_in_engine_process(proc_server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "yn", "schema": schema, "strict": True}}
    body = {"model": "tiny-qwen2", "messages": [{"role": "user", "content": "Yes?"}], "max_tokens": 60,
            "temperature": 0, "response_format": fmt}
    r = httpx.post(proc_server.url + "/v1/chat/completions", json=body, headers=proc_server.headers,
                   timeout=60)
    assert r.status_code == 200, r.text
    assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"])["ok"], bool)


def test_disconnect_cancels_in_engine_process(proc_server):
    with httpx.Client(base_url=proc_server.url, headers=proc_server.headers, timeout=60) as c:
        with c.stream("POST", "/v1/generate", json={**BODY, "max_tokens": LONG}) as r:
            events = generate_events(r)
            assert [next(events)[0] for _ in range(3)] == ["started", "token", "token"]
        health = wait_idle(c)  # the engine process freed the sequence's blocks
        assert health["kv_blocks_used"] == 0 and health["kv_blocks_total"] > 0


def test_sigterm_leaves_no_engine_process(proc_server):
    (pid,) = engine_pids(proc_server.pid)
    assert proc_server.stop() == 0
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the engine process outlived the server"


def test_engine_crash_gives_error_then_503(tiny_model, tmp_path_factory):
    srv = _start(tiny_model, tmp_path_factory, "engine-crash")
    try:
        (pid,) = engine_pids(srv.pid)
        with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=30) as c:
            with c.stream("POST", "/v1/generate", json={**BODY, "max_tokens": LONG}) as r:
                events = generate_events(r)
                assert next(events)[0] == "started" and next(events)[0] == "token"
                os.kill(pid, signal.SIGKILL)
                rest = [e for e, _ in events]  # ends (with an error event) instead of hanging
            assert rest[-1] == "error", rest[-3:]
            r = c.post("/v1/generate", json=BODY)
            assert r.status_code == 503 and r.headers.get("retry-after")
            health = c.get("/health")  # not "ok" with no engine behind it
            assert health.status_code == 503 and health.json()["status"] == "error"
            assert "engine process exited (exit code -9)" in health.json()["error"]
    finally:
        assert srv.stop() == 0
