"""Pinned test data, fetched by package name and version through pip, checked, cached and reused.

The tokenizer tests compare orcd with llama.cpp on llama.cpp's own vocabularies and test vectors
(`ggml-vocab-*.gguf` with `.inp`/`.out`) and read its chat templates (`*.jinja`). They ship in the sdist
of `llama-cpp-python` (MIT, LICENSE kept beside them), so they are obtained as any package is: `pip
download` of one pinned sdist, its sha256 checked against the digest pinned here, then only those files
are extracted into

    ~/.cache/orcd/testdata/llama-cpp-python-<version>/     (root: orcd.env.testdata_dir(), ORCD_TESTDATA_DIR)
        vocab/ggml-vocab-<name>.gguf[.inp|.out]   templates/<name>.jinja   LICENSE-llama.cpp
        manifest.json                             (sha256 of every file above)

Later calls check the manifest and reuse the cache. Fetch by hand: `python -m orcd.testdata`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orcd import env

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
ENV_VAR = "ORCD_TESTDATA_DIR"  # read by orcd.env.testdata_dir()
FETCH_HINT = "fetch it with `python -m orcd.testdata` (needs the package registry)"
_MANIFEST = "manifest.json"
_VENDOR = "vendor/llama.cpp/"
_PIP_TIMEOUT_S = 900


class TestDataError(RuntimeError):
    """The test data could not be fetched, verified or extracted; the message says why."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class TestData:
    __test__ = False  # not a pytest class
    root: Path

    @property
    def vocab_dir(self) -> Path:
        return self.root / "vocab"

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    def vocabs(self) -> list[str]:
        """Names of the vocabularies that have llama.cpp test vectors (`gpt-2`, `qwen2`, ...)."""
        return sorted(p.name[len("ggml-vocab-"):-len(".gguf.inp")] for p in self.vocab_dir.glob("*.gguf.inp"))

    def vocab_path(self, name: str) -> Path:
        return self.vocab_dir / f"ggml-vocab-{name}.gguf"

    def templates(self) -> list[Path]:
        return sorted(self.templates_dir.glob("*.jinja"))


def cache_dir() -> Path:
    return env.testdata_dir().expanduser() / f"{PACKAGE}-{VERSION}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _target(member: str) -> str | None:
    """Where an sdist member goes in the cache (relative), or None if the tests do not use it."""
    _, _, rel = member.partition("/")  # drop "llama_cpp_python-<version>/"
    if not rel.startswith(_VENDOR):
        return None
    rel = rel[len(_VENDOR):]
    if rel == "LICENSE":
        return "LICENSE-llama.cpp"
    head, _, name = rel.rpartition("/")
    if head == "models/templates" and name.endswith(".jinja"):
        return f"templates/{name}"
    if head == "models" and name.startswith("ggml-vocab-") and name.endswith((".gguf", ".inp", ".out")):
        return f"vocab/{name}"
    return None


def _check(root: Path) -> bool:
    """True if `root` holds a complete cache whose files match its manifest."""
    try:
        manifest = json.loads((root / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if (manifest.get("package"), manifest.get("version"), manifest.get("sdist_sha256")) != (
            PACKAGE, VERSION, SDIST_SHA256) or not manifest.get("files"):
        return False
    return all((root / rel).is_file() and file_sha256(root / rel) == digest
               for rel, digest in manifest["files"].items())


def _download(dest: Path) -> Path:
    # The sdist of PACKAGE only: pip still prepares its metadata in a build environment, whose build
    # requirements (scikit-build-core) come as wheels; `--no-binary :all:` would build them, and theirs,
    # from source (minutes, without a warm pip cache).
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE, "--retries", "2",
           "--disable-pip-version-check", "--dest", str(dest), f"{PACKAGE}=={VERSION}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TestDataError(f"`pip download {PACKAGE}=={VERSION}` took over {_PIP_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit status {proc.returncode}"]
        why = next((ln for ln in reversed(lines) if ln.startswith("ERROR:")), lines[-1])
        tail = "\n".join(lines[-6:])
        raise TestDataError(f"`pip download {PACKAGE}=={VERSION}` failed: {why}\n{tail}")
    sdist = dest / SDIST
    if not sdist.is_file():
        raise TestDataError(f"pip did not leave {SDIST} in {dest} (found: {sorted(os.listdir(dest))})")
    digest = file_sha256(sdist)
    if digest != SDIST_SHA256:
        raise TestDataError(f"{SDIST}: sha256 {digest}, pinned {SDIST_SHA256}; refusing to use it")
    return sdist


def _extract(sdist: Path, out: Path) -> dict[str, str]:
    """Extract the used members of `sdist` into `out`; return {relative path: sha256}."""
    files = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            rel = _target(member.name)
            if rel is None or not member.isfile():
                continue
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
            files[rel] = file_sha256(path)
    vocab_cases = [r for r in files if r.endswith(".gguf.inp")]
    missing = [r for r in vocab_cases for ext in ("", ".out") if r[:-4] + ext not in files]
    if not vocab_cases or missing or "LICENSE-llama.cpp" not in files:
        raise TestDataError(f"{SDIST} lacks files the tests use ({len(vocab_cases)} vocabularies with "
                            f"cases; missing: {missing})")
    # a vocabulary without test vectors is not used by the tests: drop it
    for rel in [r for r in files if r.endswith(".gguf") and r + ".inp" not in files]:
        (out / rel).unlink()
        del files[rel]
    return files


def fetch(verbose: bool = False) -> TestData:
    """The test data, from the cache if it is there and intact, otherwise downloaded and extracted."""
    root = cache_dir()
    if _check(root):
        return TestData(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root.parent) as tmp:
        if verbose:
            print(f"downloading {PACKAGE}=={VERSION} (sdist) with pip ...", file=sys.stderr)
        sdist = _download(Path(tmp) / "dl")
        staged = Path(tmp) / "data"
        files = _extract(sdist, staged)
        manifest = dict(package=PACKAGE, version=VERSION, sdist_sha256=SDIST_SHA256, files=files)
        (staged / _MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if root.exists():  # a stale or damaged cache, or one another process just finished
            if _check(root):
                return TestData(root)
            shutil.rmtree(root)
        try:
            staged.rename(root)
        except OSError:  # lost a race with another fetch: use its copy if it is whole
            if not _check(root):
                raise
    if not _check(root):
        raise TestDataError(f"{root}: extracted files do not match their manifest")
    return TestData(root)


def main() -> int:
    try:
        data = fetch(verbose=True)
    except TestDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(data.root)
    print(f"{len(data.vocabs())} vocabularies: {' '.join(data.vocabs())}", file=sys.stderr)
    print(f"{len(data.templates())} chat templates", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
