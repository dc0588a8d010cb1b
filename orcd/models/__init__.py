"""Transformer architectures built from GGUF tensors, chosen by `general.architecture`."""

from orcd.models.registry import get_model_class, register

__all__ = ["get_model_class", "register"]
