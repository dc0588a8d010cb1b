"""Fixtures shared across test areas (keep this small)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from orcd.gguf.synth import write_model_gguf

TINY_DIMS = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2)


@pytest.fixture(scope="session")
def tiny_qwen2_gguf(tmp_path_factory) -> Path:
    """A tiny random qwen2 file (tied, Q8_0 matrices, synthetic gpt2 vocabulary, ChatML template)."""
    path = tmp_path_factory.mktemp("tiny") / "tiny-qwen2.gguf"
    return write_model_gguf(path, "qwen2", qtypes={"default": Q.Q8_0}, seed=1, **TINY_DIMS)
