"""bench/serving/serving.py (issue 19) on the CPU: its client decodes chunked SSE exactly, and one tiny
end-to-end run (engine + a real `orcd serve` child, alternately, both routes, a mixed load on each side)
writes complete rows."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench/serving"))

from serving_client import Dechunk, token_event  # noqa: E402


def test_dechunk_is_exact_for_any_split_of_the_wire():
    payload = b"".join(b'event: token\ndata: {"i":%d,"id":%d,"t":"x"}\n\n' % (i, i) for i in range(60))
    parts = [payload[i:i + 41] for i in range(0, len(payload), 41)]
    wire = b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in parts) + b"0\r\n\r\n"
    rng = random.Random(0)
    for _ in range(100):
        d, out, i = Dechunk(), b"", 0
        while i < len(wire):
            k = rng.randint(1, 25)
            out += d.feed(wire[i:i + k])
            i += k
        assert out == payload and d.done


def test_token_events_are_told_apart_from_the_rest():
    assert token_event("generate", b'event: token\ndata: {"i":0,"id":5,"t":"a"}')
    assert not token_event("generate", b'event: token\ndata: {"i":3,"id":null,"t":"a"}')  # held-back text
    assert not token_event("generate", b'event: end\ndata: {"tokens_out":3}')
    assert token_event("chat", b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}')
    assert not token_event("chat", b'data: {"choices":[{"index":0,"delta":{"content":""}}]}')


def test_serving_bench_runs_end_to_end_on_the_cpu(tmp_path):
    cmd = [sys.executable, "bench/serving/serving.py", "--device", "cpu", "--streams", "1,3",
           "--gen-len", "8", "--min-round-tokens", "12", "--prompt-len", "12", "--warmup-len", "2",
           "--repeat", "1",
           "--max-num-seqs", "4", "--mixed-rates", "1", "--mixed-seconds", "1", "--mixed-prompt", "12,4,24",
           "--mixed-output", "6,2,12", "--client-procs", "2", "--out-dir", str(tmp_path),
           "--model", f"tiny={REPO / 'orcd/assets/demo.gguf'}"]  # a name that is not the file's stem
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    out = json.loads((tmp_path / "serving.json").read_text())
    rows = {(r["route"], r["streams"]): r for r in out["rows"]}
    assert set(rows) == {(route, c) for route in ("generate", "chat") for c in (1, 3)}
    for (_, c), r in rows.items():
        # every token the server generated, counted; one stream's request stretched to 12 tokens
        assert r["tokens"] == {1: 12, 3: 24}[c] and r["n_errors"] == 0
        assert r["engine_tok_s"] > 0 and r["http_tok_s"] > 0 and r["http_over_engine"] > 0
        assert r["ttft_p50_ms"] > 0 and r["itl_p50_ms"] is not None and 0 < r["client_busy"] < 1
        assert len(r["repeats_ratio"]) == 1 and r["engine_ttft_p50_ms"] > 0  # the paired engine round
    sides = {m["side"]: m for m in out["mixed"]}
    assert set(sides) == {"engine", "http"} and sides["engine"]["requests"] == sides["http"]["requests"]
    for mixed in sides.values():
        assert mixed["n_errors"] == 0 and mixed["requests"] >= 1 and mixed["goodput_req_s"] is not None
    assert "| after | tiny | chat | 3 |" in (tmp_path / "serving.md").read_text()


def test_api_processes_expand_the_servers():
    from serving import parse_args

    args = parse_args(["--device", "cpu", "--api-processes", "1,2", "--server", "after=. --engine-process"])
    assert [(tag, own) for tag, _, _, own in args.servers] == [
        ("after-api1", ["--engine-process", "--api-processes", "1"]),
        ("after-api2", ["--engine-process", "--api-processes", "2"])]
    assert args.mixed_tags == ["after-api1", "after-api2"]
