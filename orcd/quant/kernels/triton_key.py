"""Triton's per-process cache key, remembered across processes.

Before its first kernel lookup in a process, Triton computes `triton.runtime.cache.triton_key()`: the
SHA-256 of its compiler, backend and language sources and of libtriton (~500 MB), ~0.4 s on the H100
host, on the critical path of every server start. The key only changes when those files change, so
`install_cached_triton_key()` keeps it in a small file named after a signature of the same files
(relative path, size, mtime in ns: a few hundred `stat` calls, ~ms): an upgraded or edited Triton gets a
new signature and the real hash again. Triton's own compile worker pool patches the same attribute
(`triton.runtime.cache.triton_key = lambda: key`) to hand the key to its workers.

Cache file: $ORCD_CACHE_DIR or ~/.cache/orcd, `triton_key-<signature>.txt`. Any failure leaves Triton as
it was (it then hashes as usual).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from orcd import env

_KEYED_DIRS = ("compiler", "backends", "language")  # what triton_key() hashes, besides the two files below


def cache_dir() -> Path:
    return env.cache_dir()


def files_signature(root: Path) -> str:
    """SHA-256 over (path, size, mtime_ns) of every .py under the keyed dirs, runtime/cache.py and _C/*."""
    h = hashlib.sha256()
    paths = [root / "runtime" / "cache.py", *sorted((root / "_C").glob("*"))]
    for sub in _KEYED_DIRS:
        paths += sorted((root / sub).rglob("*.py"))
    for p in paths:
        st = p.stat()
        h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def install_cached_triton_key() -> str:
    """Triton's key from the cache file (or computed and stored there), installed as the process's
    `triton_key()`; returns it."""
    import triton
    import triton.runtime.cache as tc

    root = Path(triton.__file__).parent
    path = cache_dir() / f"triton_key-{triton.__version__}-{files_signature(root)[:32]}.txt"
    try:
        key = path.read_text()
    except OSError:
        key = ""
    if not key.startswith(triton.__version__):  # missing or unreadable: hash for real, then remember it
        key = tc.triton_key()
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            f.write(key)
        os.replace(f.name, path)  # atomic: a concurrent reader sees the whole key or none
    tc.triton_key = lambda: key
    return key
