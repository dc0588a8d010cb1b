"""Architecture registry keyed by GGUF `general.architecture`. Adding a model = one file in orcd/models/
with an `@register("arch")` class: every module of the package is imported on the first lookup."""

from __future__ import annotations

import importlib
import pkgutil

from orcd.errors import UnsupportedArchitectureError

_MODELS: dict[str, type] = {}
_PACKAGE = "orcd.models"
_NOT_MODELS = frozenset({"registry", "decoder", "kv_cache", "layers"})  # shared code, no architectures
_discovered: list[bool] = []


def register(arch: str):
    """Class decorator: `@register("qwen2")`."""

    def deco(cls: type) -> type:
        _MODELS[arch] = cls
        cls.architecture = arch
        return cls

    return deco


def _discover() -> None:
    """Import every architecture module of orcd.models (once); their @register calls fill _MODELS."""
    if _discovered:
        return
    package = importlib.import_module(_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _NOT_MODELS and not info.name.startswith("_"):
            importlib.import_module(f"{_PACKAGE}.{info.name}")
    _discovered.append(True)


def get_model_class(arch: str) -> type:
    _discover()
    try:
        return _MODELS[arch]
    except KeyError:
        have = ", ".join(sorted(_MODELS))
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported (supported: {have})"
        ) from None


def supported_architectures() -> list[str]:
    _discover()
    return sorted(_MODELS)
