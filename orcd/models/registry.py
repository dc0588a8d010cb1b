"""Architecture registry keyed by GGUF `general.architecture`. Adding a model = one file + @register."""

from __future__ import annotations

import importlib

from orcd.errors import UnsupportedArchitectureError

_MODELS: dict[str, type] = {}
_BUILTIN_MODULES = ("orcd.models.qwen2", "orcd.models.llama")


def register(arch: str):
    """Class decorator: `@register("qwen2")`."""

    def deco(cls: type) -> type:
        _MODELS[arch] = cls
        cls.architecture = arch
        return cls

    return deco


def get_model_class(arch: str) -> type:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)
    try:
        return _MODELS[arch]
    except KeyError:
        have = ", ".join(sorted(_MODELS))
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported (supported: {have})"
        ) from None


def supported_architectures() -> list[str]:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)
    return sorted(_MODELS)
