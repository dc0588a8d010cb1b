"""`orcd serve --api-processes 2`: two API processes over one engine process, sharing the port.
Real servers on loopback and the official `openai` client: both processes answer; concurrent chat and
generate streams give the same tokens as one process; /metrics sums both processes' counters; a client
that disconnects frees its blocks; SIGTERM leaves no process; a killed engine process gives 503 on
/health and on requests; a killed parent leaves no process either; /v1/cancel reaches a request that the
other process runs. Tests run in file order."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from server_helpers import LONG, ServerProc, generate_events, metric, wait_idle
from test_engine_process import alive

GEN = {"max_tokens": 12, "temperature": 0.8, "ignore_eos": True}
PROMPTS = ["The quick brown fox", "Once upon a time", "Hello there", "A B C D"]
N = 4  # streams per route


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except FileNotFoundError:
            continue
        out += kids
        todo += kids
    return out


def _start(tiny_model, tmp_path_factory, name: str) -> ServerProc:
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("log") / f"{name}.log", "--api-processes", "2",
                     "--max-num-seqs", "8", "--ping-interval", "0.05")
    srv.wait_ready()
    deadline = time.monotonic() + 60
    while "served by 2 API processes" not in srv.log():  # the first one up answers /health already
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.1)
    return srv


@pytest.fixture(scope="module")
def two(tiny_model, tmp_path_factory) -> Iterator[ServerProc]:
    srv = _start(tiny_model, tmp_path_factory, "api-processes")
    try:
        yield srv
    finally:
        srv.stop()


def _generate(srv: ServerProc, i: int) -> list[int]:
    body = {"prompt": PROMPTS[i % 4], "seed": i, **GEN}
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as c:  # a connection each
        with c.stream("POST", "/v1/generate", json=body) as r:
            assert r.status_code == 200, r.read()
            return [d["id"] for e, d in generate_events(r) if e == "token"]


def _chat(srv: ServerProc, i: int) -> str:
    with openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key, max_retries=0, timeout=60) as oai:
        messages = [{"role": "user", "content": PROMPTS[i % 4]}]
        stream = oai.chat.completions.create(model="tiny-qwen2", messages=messages, stream=True, seed=i,
                                             max_tokens=12, temperature=0.8)
        return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)


def _all(srv: ServerProc, workers: int) -> tuple[list, list]:
    with ThreadPoolExecutor(workers) as pool:
        gens = pool.map(lambda i: _generate(srv, i), range(N))
        chats = pool.map(lambda i: _chat(srv, i), range(N))
        return list(gens), list(chats)


def test_both_processes_answer(two):
    pids = set()
    deadline = time.monotonic() + 30
    while len(pids) < 2:  # a fresh connection each: the kernel hands it to either process
        assert time.monotonic() < deadline, pids
        pids.add(httpx.get(two.url + "/health", timeout=5).json()["pid"])
    assert pids <= set(descendants(two.pid))


def test_same_tokens_as_one_process_and_summed_metrics(two, server):
    want = _all(server, 1)  # one process, one request at a time (its queue holds 3)
    assert _all(two, 2 * N) == want  # all at once over two processes
    seen, deadline = [], time.monotonic() + 10
    while len(seen) < 4:  # whichever process answers, the counters are both processes' together
        text = httpx.get(two.url + "/metrics", headers=two.headers, timeout=5).text
        counts = [_finished(text, route) for route in ("generate", "chat")]
        if counts == [N, N]:  # (a job is counted just after its last byte went out: wait for it)
            seen.append(metric(text, "orcd_generation_tokens_total"))
        assert time.monotonic() < deadline, counts
    assert len(set(seen)) == 1 and N * 12 + N <= seen[0] <= 2 * N * 12  # chats may end early, at EOS


def _finished(text: str, route: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("orcd_requests_total{") and f'route="{route}"' in line)


def _client_of(srv: ServerProc, avoid: int | None) -> tuple[httpx.Client, int]:
    """A client whose kept-alive connection is served by one API process (not `avoid`), and its pid."""
    for _ in range(50):
        c = httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60)
        pid = c.get("/health").json()["pid"]  # the next requests reuse this connection
        if pid != avoid:
            return c, pid
        c.close()
    raise AssertionError("one API process answered every connection")


def test_cancel_by_id_from_the_other_process(two):
    runner, pid = _client_of(two, None)
    other, other_pid = _client_of(two, pid)
    try:
        body = {"prompt": "x", "max_tokens": LONG, "ignore_eos": True, "request_id": "far-away"}
        with runner.stream("POST", "/v1/generate", json=body) as r:
            events = generate_events(r)
            assert [next(events)[0] for _ in range(2)] == ["started", "token"]
            assert other.get("/health").json()["pid"] == other_pid != pid
            assert other.post("/v1/cancel", json={"request_id": "far-away"}).json()["cancelled"] is True
            end = [d for e, d in events if e == "end"]
        assert end[0]["stop_reason"] == "cancelled"
        assert other.post("/v1/cancel", json={"request_id": "far-away"}).status_code == 404
    finally:
        runner.close()
        other.close()


def test_disconnect_frees_blocks(two):
    with httpx.Client(base_url=two.url, headers=two.headers, timeout=60) as c:
        body = {"prompt": "x", "max_tokens": LONG, "ignore_eos": True}
        with c.stream("POST", "/v1/generate", json=body) as r:
            events = generate_events(r)
            assert [next(events)[0] for _ in range(3)] == ["started", "token", "token"]
        health = wait_idle(c)  # the engine freed the sequence's blocks, whichever process asks
        assert health["kv_blocks_used"] == 0 and health["kv_blocks_total"] > 0


def test_sigterm_leaves_no_process(two):
    procs = descendants(two.pid)
    assert len(procs) >= 3  # the engine and two API processes (+ multiprocessing's resource tracker)
    assert two.stop() == 0
    deadline = time.monotonic() + 10
    while any(alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in procs if alive(p)]


def _engine_pid(srv: ServerProc) -> int:
    """The engine process: the one child that never answers /health."""
    answering = {httpx.get(srv.url + "/health", timeout=5).json()["pid"] for _ in range(20)}
    (pid,) = [p for p in Path(f"/proc/{srv.pid}/task/{srv.pid}/children").read_text().split()
              if int(p) not in answering and b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
              and b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
    return int(pid)


def test_engine_kill_gives_503_then_parent_kill_leaves_nothing(tiny_model, tmp_path_factory):
    srv = _start(tiny_model, tmp_path_factory, "api-processes-crash")
    procs = descendants(srv.pid)
    try:
        os.kill(_engine_pid(srv), signal.SIGKILL)
        deadline = time.monotonic() + 20
        while True:  # both processes see the engine's socket close
            health = [httpx.get(srv.url + "/health", timeout=5) for _ in range(8)]
            if all(h.status_code == 503 for h in health) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {h.status_code for h in health} == {503}
        assert {h.json()["status"] for h in health} == {"error"}
        assert "engine process exited" in health[0].json()["error"]
        r = httpx.post(srv.url + "/v1/generate", json={"prompt": "x", "max_tokens": 2}, headers=srv.headers)
        assert r.status_code == 503 and r.headers.get("retry-after")
    finally:
        os.kill(srv.pid, signal.SIGKILL)  # no drain by the parent: the API processes see its pipe close
        srv.proc.wait()
        deadline = time.monotonic() + 20
        while any(alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        srv.stop()
    assert not [p for p in procs if alive(p)], srv.log()
