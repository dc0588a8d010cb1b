"""The remembered Triton cache key: equal to Triton's own, reused from its file, renewed when Triton's
files change."""

from __future__ import annotations

import os

import pytest

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")


def test_key_equals_tritons_own_and_is_reused(tmp_path, monkeypatch):
    import triton.runtime.cache as tc

    from orcd.quant.kernels import triton_key as tk

    real = tc.triton_key
    monkeypatch.setattr(tc, "triton_key", real)  # restored after the test
    monkeypatch.setenv("ORCD_CACHE_DIR", str(tmp_path))
    key = tk.install_cached_triton_key()
    assert key == real() and tc.triton_key() == key
    (stored,) = tmp_path.glob("triton_key-*.txt")
    stored.write_text(key + "-from-the-file")  # the second process reads the file instead of hashing
    monkeypatch.setattr(tc, "triton_key", real)
    assert tk.install_cached_triton_key() == key + "-from-the-file"
    stored.write_text("garbage")  # a file that is not a key is replaced by the real hash
    monkeypatch.setattr(tc, "triton_key", real)
    assert tk.install_cached_triton_key() == key and stored.read_text() == key


def test_signature_follows_size_and_mtime(tmp_path):
    from orcd.quant.kernels.triton_key import files_signature

    for sub in ("runtime", "_C", "compiler", "backends/nvidia", "language"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "runtime" / "cache.py").write_text("x")
    (tmp_path / "_C" / "libtriton.so").write_bytes(b"\0" * 64)
    (tmp_path / "backends" / "nvidia" / "compiler.py").write_text("a = 1")
    sig = files_signature(tmp_path)
    assert files_signature(tmp_path) == sig
    lib = tmp_path / "_C" / "libtriton.so"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # rebuilt library, same size
    assert files_signature(tmp_path) != sig
    sig = files_signature(tmp_path)
    (tmp_path / "language" / "core.py").write_text("b = 2")  # a new source file
    assert files_signature(tmp_path) != sig
