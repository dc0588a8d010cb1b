"""bench/tp/llama_split.py report: orcd's TP rows joined with llama.cpp's split modes (TP=1 beside
`none`, TP=2 beside `layer` and `row`), missing llama.cpp figures as null."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_report_joins_tp_rows_with_split_modes(tmp_path):
    base = {"device": "cuda:0", "gpu": "H100", "prefill_tokens": 512, "decode_tokens": 64}
    tp = [{**base, "ranks": n, "decode_streams": s, "decode_tok_s": 100.0 * n * s,
           "prefill_tok_s": 9000.0 / n} for n in (1, 2) for s in (1, 8)]
    llama = {"prompt": 16, "gen": 64, "errors": ["batched none: no time left"],
             "modes": {"layer": {"bench": {"pp512": 6000.0, "tg128": 150.0},
                                 "batched": {"1": 100.0, "8": 800.0}},
                       "row": {"bench": {"pp512": 3000.0}, "batched": {"1": 50.0}},
                       "none": {"bench": {"pp512": 9000.0, "tg128": 160.0}}}}
    (tmp_path / "tp.json").write_text(json.dumps(tp))
    (tmp_path / "ll.json").write_text(json.dumps(llama))
    args = ["report", "--tp", str(tmp_path / "tp.json"), "--llama", str(tmp_path / "ll.json"),
            "--out", str(tmp_path), "--commit", "abc"]
    p = subprocess.run([sys.executable, "bench/tp/llama_split.py", *args], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = json.loads((tmp_path / "peers_tp.json").read_text())
    key = {(r["metric"].split()[0], r["streams"], r["tp"], r["split_mode"]): r for r in rows}
    assert len(rows) == 2 * 1 + 2 * 2 + 1 + 2  # decode: TP1 x none, TP2 x layer/row; prefill likewise
    assert set(rows[0]) == {"model", "streams", "metric", "orcd", "llama_cpp", "device", "tp", "split_mode"}
    assert key[("decode", 8, 2, "layer")]["llama_cpp"] == 800.0
    assert key[("decode", 8, 2, "layer")]["orcd"] == 1600
    assert key[("decode", 8, 2, "row")]["llama_cpp"] is None
    assert key[("decode", 1, 1, "none")]["llama_cpp"] is None  # batched-bench none did not run
    assert key[("prefill", 1, 2, "row")]["llama_cpp"] == 3000.0
    assert key[("prefill", 1, 1, "none")]["orcd"] == 9000
    md = (tmp_path / "peers_tp.md").read_text()
    assert "| 2 | 200.0 | row | 50.0 | 4.00× |" in md  # TP=2 decode, 1 stream: orcd 200 vs row's 50
    assert "no time left" in md
