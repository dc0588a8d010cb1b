"""HAZARDS.md "GGUF files are untrusted input", end to end: `orcd serve` and `orcd inspect` given a crafted
file (Ollama's 4-byte crash, a 43-byte header whose counts no file could hold, tensor data past the end of
the file, a zero alignment that a padding computation would divide by) exit with status 2 and one `error:`
line naming the file: no traceback, no hang. The reader's field-by-field checks are tests/gguf/."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from live_server import TINY, free_port

from orcd.gguf.synth import write_model_gguf

SMALL = {**TINY, "vocab_size": 300, "n_layers": 1}


def _crafted(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, words its error must hold)."""
    valid = write_model_gguf(tmp / "valid.gguf", "qwen2", seed=1, **SMALL).read_bytes()
    header = b"GGUF" + struct.pack("<IQQ", 3, 2**62, 2**63) + bytes(19)  # 43 bytes, absurd counts
    files = {"four-bytes": (b"GGUF", "too short"),
             "counts-43": (header, "more than the file"),
             "data-past-end": (valid[:-1000], "past the end")}
    out = {}
    for name, (data, words) in files.items():
        (tmp / f"{name}.gguf").write_bytes(data)
        out[name] = (tmp / f"{name}.gguf", words)
    zero = write_model_gguf(tmp / "align-0.gguf", "qwen2", seed=1, extra_metadata={"general.alignment": 0},
                            **SMALL)
    out["align-0"] = (zero, "power of two")
    return out


def _orcd(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orcd", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _assert_one_error_line(p: subprocess.Popen, path: Path, words: str) -> None:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, (path.name, out, err)
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(errors) == 1 and path.name in errors[0] and words in errors[0], (path.name, err)
    assert "Traceback" not in out + err, (path.name, err)


def test_crafted_files_are_refused_in_one_line(tmp_path):
    """`orcd serve` on the file whose tensor data runs past the end (the heap-leak one); `orcd inspect`
    (the same reader, without the server's start-up cost) on all of them."""
    cases = _crafted(tmp_path)
    path, words = cases["data-past-end"]
    serve = _orcd("serve", "--model", str(path), "--device", "cpu", "--port", str(free_port()))
    for p, w in cases.values():
        _assert_one_error_line(_orcd("inspect", str(p)), p, w)
    _assert_one_error_line(serve, path, words)
