"""load_model builds the tokenizer on a side thread and pauses the GC: same results, errors still raised
in the caller, nothing left running, the GC state restored."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import pytest

from orcd.errors import GGUFError, TokenizerError
from orcd.gguf import open_gguf
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import LoadOptions, gc_paused, load_model
from orcd.tokenizer import load_tokenizer

TINY = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2)
TEXT = "Hello world, tokenizer built on a side thread <|im_end|> 123"


def side_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("orcd-")]


@pytest.mark.parametrize(("gc_on", "overlap"), [(True, True), (False, True), (True, False)])
def test_same_tokenizer_and_state_restored(tiny_qwen2_gguf: Path, gc_on: bool, overlap: bool) -> None:
    (gc.enable if gc_on else gc.disable)()
    interval = sys.getswitchinterval()
    try:
        loaded = load_model(tiny_qwen2_gguf, "cpu", options=LoadOptions(overlap=overlap))
        assert gc.isenabled() == gc_on and sys.getswitchinterval() == interval
    finally:
        gc.enable()
    ref = load_tokenizer(open_gguf(tiny_qwen2_gguf).metadata)
    tok = loaded.tokenizer
    assert tok.encode(TEXT, parse_special=True) == ref.encode(TEXT, parse_special=True)
    assert list(tok.pieces) == list(ref.pieces) and tok.vocab.tokens == ref.vocab.tokens
    assert {"open", "check", "weights", "tokenizer", "tokenizer_wait"} <= set(loaded.phases)
    ends = loaded.timeline  # when each phase ended, in order, within the load
    assert list(ends.values()) == sorted(ends.values()) and max(ends.values()) <= loaded.load_seconds + 1e-6
    assert ends["open"] <= ends["check"] <= ends["weights"] and "tokenizer" in ends
    assert side_threads() == []


def test_without_tokenizer(tiny_qwen2_gguf: Path) -> None:
    loaded = load_model(tiny_qwen2_gguf, "cpu", tokenizer=False)
    assert loaded.tokenizer is None and loaded.phases["tokenizer"] == 0.0


@pytest.mark.parametrize("overlap", [True, False])
def test_tokenizer_error_reaches_the_caller(tmp_path: Path, overlap: bool) -> None:
    path = write_model_gguf(tmp_path / "bad-pre.gguf", "qwen2", seed=3, **TINY,
                            extra_metadata={"tokenizer.ggml.pre": "mystery-bpe"})
    interval = sys.getswitchinterval()
    with pytest.raises(TokenizerError, match="unknown tokenizer.ggml.pre 'mystery-bpe'"):
        load_model(path, "cpu", options=LoadOptions(overlap=overlap))
    assert gc.isenabled() and side_threads() == []
    assert sys.getswitchinterval() == interval


def test_weights_error_wins_and_joins_the_tokenizer(tmp_path: Path) -> None:
    # a file whose tokenizer and weights both fail: the weights' error is raised, no thread is left
    bad = {"tokenizer.ggml.pre": "mystery-bpe", "qwen2.rope.scaling.type": "nope"}  # rotary: in from_gguf
    path = write_model_gguf(tmp_path / "bad-both.gguf", "qwen2", seed=4, **TINY, extra_metadata=bad)
    with pytest.raises(GGUFError, match="rope scaling type 'nope'"):
        load_model(path, "cpu")
    assert gc.isenabled() and side_threads() == []


def test_gc_paused_restores_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        assert not gc.isenabled()
        1 / 0  # noqa: B018
    assert gc.isenabled()
