"""The one module that reads environment variables; the rest of orcd receives these values as arguments
or calls these functions at its edges (CLI, caches, tests).

| variable | meaning | default |
|---|---|---|
| `ORCD_CACHE_DIR` | orcd's own cache (Triton's remembered key, test data) | `~/.cache/orcd` |
| `ORCD_TESTDATA_DIR` | pinned test data fetched by `orcd/testdata.py` | `$ORCD_CACHE_DIR/testdata` |
| `ORCD_API_KEY` | `orcd serve`'s API key when `--api-key` is not given | none (no auth) |
| `ORCD_ENGINE_PROCESS` | `orcd serve`: `--engine-process` (1) or `--no-engine-process` (0) | CUDA: 1 |
| `TRITON_INTERPRET` | Triton's own switch: kernels run on the CPU interpreter (tests) | off |
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("ORCD_CACHE_DIR") or Path.home() / ".cache" / "orcd")


def testdata_dir() -> Path:
    return Path(os.environ.get("ORCD_TESTDATA_DIR") or cache_dir() / "testdata")


def api_key() -> str | None:
    return os.environ.get("ORCD_API_KEY") or None


def triton_interpreter() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def engine_process() -> bool | None:
    """`orcd serve --engine-process`'s default from ORCD_ENGINE_PROCESS: True (1), False (0), None (unset)."""
    value = os.environ.get("ORCD_ENGINE_PROCESS")
    return None if value in (None, "") else value not in ("0", "false", "no")
