"""orcd.testdata without the network: member selection, extraction, manifest checks and cache reuse
(the download is replaced by a small fake sdist)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from orcd import testdata

TOP = f"llama_cpp_python-{testdata.VERSION}/vendor/llama.cpp/"
MEMBERS = {
    "LICENSE": b"MIT",
    "models/ggml-vocab-a.gguf": b"gguf a", "models/ggml-vocab-a.gguf.inp": b"x\n__ggml_vocab_test__\n",
    "models/ggml-vocab-a.gguf.out": b" 1\n", "models/ggml-vocab-nocases.gguf": b"gguf b",
    "models/templates/chatml.jinja": b"{{ x }}", "models/templates/README.md": b"no",
    "src/llama-vocab.cpp": b"no", "models/ggml-vocab-a.gguf.inp.txt": b"no",
}


def fake_sdist(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in MEMBERS.items():
            info = tarfile.TarInfo(TOP + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch) -> list[int]:
    """ORCD_TESTDATA_DIR in tmp_path, downloads served by fake_sdist; returns the download counter."""
    monkeypatch.setenv(testdata.ENV_VAR, str(tmp_path / "cache"))
    calls = []

    def download(dest: Path) -> Path:
        calls.append(1)
        dest.mkdir(parents=True)
        return fake_sdist(dest / testdata.SDIST)

    monkeypatch.setattr(testdata, "_download", download)
    return calls


def test_extracts_only_what_the_tests_use(fake, tmp_path) -> None:
    data = testdata.fetch()
    assert data.root == tmp_path / "cache" / f"{testdata.PACKAGE}-{testdata.VERSION}"
    files = sorted(str(p.relative_to(data.root)) for p in data.root.rglob("*") if p.is_file())
    assert files == ["LICENSE-llama.cpp", "manifest.json", "templates/chatml.jinja",
                     "vocab/ggml-vocab-a.gguf", "vocab/ggml-vocab-a.gguf.inp", "vocab/ggml-vocab-a.gguf.out"]
    assert data.vocabs() == ["a"] and data.vocab_path("a").read_bytes() == b"gguf a"
    manifest = json.loads((data.root / "manifest.json").read_text())
    assert manifest["sdist_sha256"] == testdata.SDIST_SHA256 and len(manifest["files"]) == 5


def test_cache_is_reused_and_refetched_when_damaged(fake) -> None:
    data = testdata.fetch()
    assert testdata.fetch() == data and len(fake) == 1
    data.vocab_path("a").write_bytes(b"tampered")
    assert testdata.fetch() == data and len(fake) == 2
    assert data.vocab_path("a").read_bytes() == b"gguf a"


def test_pip_failure_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(testdata.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(testdata, "VERSION", "0.0.0-does-not-exist")
    with pytest.raises(testdata.TestDataError, match=r"pip download llama-cpp-python==0\.0\.0.* failed: "):
        testdata.fetch()
