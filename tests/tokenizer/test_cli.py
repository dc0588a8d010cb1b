"""`orcd tokenize`: twice through a real subprocess, the other modes through `orcd.cli.main` in-process."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from tokenizer_testdata import Vocabs

from orcd.cli.main import main

TEXTS = ["Hello", "naïve 🦙\nline <|end|>", ""]


@pytest.fixture(scope="module")
def model(vocabs: Vocabs) -> str:
    return str(vocabs.path("phi-3"))


def orcd(model: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orcd", "tokenize", "--model", model, *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def in_process(capsys, monkeypatch, model: str, *args: str, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(["tokenize", "--model", model, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_subprocess_text_with_flags(model: str) -> None:
    res = orcd(model, "--add-special", "--parse-special", "Hello world<|end|>")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["1", "15043", "3186", "32007"]


def test_subprocess_stdin_json_lines(vocabs: Vocabs, model: str) -> None:
    res = orcd(model, stdin="".join(json.dumps(t) + "\n" for t in TEXTS))
    assert res.returncode == 0, res.stderr
    assert [json.loads(line) for line in res.stdout.splitlines()] == [vocabs.tokenizer("phi-3").encode(t)
                                                                       for t in TEXTS]


def test_text_and_decode_modes(vocabs: Vocabs, model: str, capsys, monkeypatch) -> None:
    tok = vocabs.tokenizer("phi-3")
    rc, out, _ = in_process(capsys, monkeypatch, model, "Hello world<|end|>")
    assert rc == 0 and out.split() == [str(i) for i in tok.encode("Hello world<|end|>")]
    rows = [tok.encode(t) for t in TEXTS]
    stdin = "".join(json.dumps(r) + "\n" for r in rows)
    rc, out, _ = in_process(capsys, monkeypatch, model, "--decode", stdin=stdin)
    assert rc == 0 and [json.loads(line) for line in out.splitlines()] == TEXTS
    rc, out, _ = in_process(capsys, monkeypatch, model, "--decode", " ".join(map(str, rows[1])))
    assert rc == 0 and out == TEXTS[1] + "\n"


@pytest.mark.parametrize(("args", "stdin", "message"), [
    ((), "not json\n", "line 1"),
    (("--decode",), '["a"]\n', "line 1"),
    (("--decode", "1 99999999"), "", "outside the vocabulary"),
    (("--decode", "1 x"), "", "integer token ids"),
])
def test_bad_input_is_one_line_error(model: str, capsys, monkeypatch, args, stdin, message) -> None:
    rc, _, err = in_process(capsys, monkeypatch, model, *args, stdin=stdin)
    assert rc == 2 and message in err and err.count("\n") == 1
