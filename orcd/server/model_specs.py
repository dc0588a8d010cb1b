"""Which models `orcd serve` serves, by name: `--model [NAME=]PATH` (repeatable) and `--models-dir DIR`
(every *.gguf in it, under its file stem)."""

from __future__ import annotations

import re
from pathlib import Path

from orcd.errors import OrcdError
from orcd.hub import resolve_model_path
from orcd.server.model_pool import ModelSpec

NAME = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def split_alias(spec: str) -> tuple[str | None, str]:
    """`name=path` -> (name, path); a spec that is an existing file, or whose part before `=` is not a
    name, is a path (`hf:` specs have no `=`)."""
    name, sep, rest = spec.partition("=")
    if not sep or Path(spec).expanduser().is_file() or not NAME.match(name) or not rest:
        return None, spec
    return name, rest


def model_specs(models: list[str] | None, models_dir: str | None) -> list[ModelSpec]:
    """The served models in command-line order (then the directory's, sorted); names must be unique.
    Paths are resolved now (`hf:` files downloaded), so a typo fails at startup, not at first use."""
    specs: list[ModelSpec] = []
    for spec in models or []:
        name, where = split_alias(spec)
        path = resolve_model_path(where)
        specs.append(ModelSpec(name or path.stem, path))
    if models_dir is not None:
        folder = Path(models_dir).expanduser()
        if not folder.is_dir():
            raise OrcdError(f"--models-dir {models_dir}: not a directory")
        files = sorted(p for p in folder.glob("*.gguf") if p.is_file())
        if not files:
            raise OrcdError(f"--models-dir {models_dir}: no .gguf files in it")
        specs += [ModelSpec(p.stem, p) for p in files]
    seen: dict[str, Path] = {}
    unique = []
    for s in specs:
        if not NAME.match(s.name):
            raise OrcdError(f"model name {s.name!r} ({s.path}): use NAME=PATH with letters, digits, . _ : -")
        if s.name in seen and seen[s.name].resolve() == s.path.resolve():
            continue  # the same file under the same name twice (--model and --models-dir): one model
        if s.name in seen:
            raise OrcdError(f"two models named {s.name!r} ({seen[s.name]} and {s.path}): "
                            "give one another name with --model NAME=PATH")
        seen[s.name] = s.path
        unique.append(s)
    return unique
