"""`orcd tokenize` through a real subprocess on a shared vocabulary."""

from __future__ import annotations

import json
import subprocess
import sys

from tokenizer_testdata import tokenizer_for, vocab_path

MODEL = str(vocab_path("phi-3"))


def orcd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orcd.cli", "tokenize", "--model", MODEL, *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def test_text_argument_and_flags() -> None:
    tok = tokenizer_for("phi-3")
    plain = orcd("Hello world<|end|>")
    assert plain.returncode == 0
    assert plain.stdout.split() == [str(i) for i in tok.encode("Hello world<|end|>")]
    special = orcd("--add-special", "--parse-special", "Hello world<|end|>")
    assert special.stdout.split() == ["1", "15043", "3186", "32007"]


def test_stdin_json_lines_and_decode() -> None:
    texts = ["Hello", "naïve 🦙\nline", ""]
    res = orcd(stdin="".join(json.dumps(t) + "\n" for t in texts))
    assert res.returncode == 0
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows == [tokenizer_for("phi-3").encode(t) for t in texts]
    back = orcd("--decode", stdin="".join(json.dumps(r) + "\n" for r in rows))
    assert [json.loads(line) for line in back.stdout.splitlines()] == texts
    one = orcd("--decode", " ".join(map(str, rows[1])))
    assert one.stdout == texts[1] + "\n"


def test_bad_input_is_one_line_error() -> None:
    res = orcd(stdin="not json\n")
    assert res.returncode == 2 and "line 1" in res.stderr and "Traceback" not in res.stderr
    res = orcd("--decode", "1 99999999")
    assert res.returncode == 2 and "outside the vocabulary" in res.stderr
