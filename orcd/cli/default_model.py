"""Where a model comes from when the user names none, and how a --model spec becomes a file path."""

from __future__ import annotations

from pathlib import Path

from orcd.errors import OrcdError

DEMO_MODEL = Path(__file__).resolve().parent.parent / "assets" / "demo.gguf"


def default_model_path() -> Path:
    """The embedded demo model (orcd/assets/demo.gguf); OrcdError if this install lacks it."""
    if not DEMO_MODEL.is_file():
        raise OrcdError(f"no --model given and the embedded demo model is missing ({DEMO_MODEL})")
    return DEMO_MODEL


def resolve_model(spec: str | None) -> Path:
    """None -> the demo model; "hf:OWNER/REPO/FILE" -> orcd.hub (download or cache); else a local file."""
    if spec is None:
        return default_model_path()
    if spec.startswith("hf:"):
        try:
            from orcd.hub import resolve_model_path
        except ImportError as err:
            raise OrcdError(f"cannot resolve {spec}: Hugging Face Hub support is not available") from err
        return Path(resolve_model_path(spec))
    path = Path(spec).expanduser()
    if not path.is_file():
        raise OrcdError(f"model file not found: {spec}")
    return path
