"""validate_tensors (presence, shape vs config, supported type) and `orcd inspect`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from orcd.cli.main import main
from orcd.errors import GGUFError, UnsupportedQuantTypeError
from orcd.gguf import open_gguf
from orcd.gguf.config import model_config_from_gguf
from orcd.gguf.synth import tensor_shapes, write_model_gguf
from orcd.gguf.validate import validate_tensors

DIMS = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2)


def expected(cfg, tied: bool = True) -> dict:
    return tensor_shapes(cfg.arch, cfg.vocab_size, cfg.hidden_size, cfg.n_layers, cfg.ffn_size, cfg.n_heads,
                         cfg.n_kv_heads, tied)


def test_valid_file_passes(tiny_qwen2_gguf: Path) -> None:
    f = open_gguf(tiny_qwen2_gguf)
    cfg = model_config_from_gguf(f)
    validate_tensors(f, cfg, expected(cfg), {"output.weight": (cfg.vocab_size, cfg.hidden_size)})


def test_missing_tensor(tiny_qwen2_gguf: Path) -> None:
    f = open_gguf(tiny_qwen2_gguf)
    cfg = model_config_from_gguf(f)
    with pytest.raises(GGUFError, match="missing tensor output.weight$"):
        validate_tensors(f, cfg, expected(cfg, tied=False))


def test_shape_contradicting_config(tmp_path: Path) -> None:
    p = write_model_gguf(tmp_path / "m.gguf", "llama", extra_metadata={"llama.embedding_length": 128},
                         tokenizer_metadata={}, **DIMS)
    f = open_gguf(p)
    cfg = model_config_from_gguf(f)
    with pytest.raises(GGUFError, match=r"token_embd.weight has shape \[320, 64\], but the metadata "
                                        r"\(llama: hidden 128.*\) says \[320, 128\]"):
        validate_tensors(f, cfg, expected(cfg))


def test_unsupported_type_in_file(tmp_path: Path) -> None:
    p = tmp_path / "iq.gguf"
    w = GGUFWriter(p, "llama")
    w.add_uint32("llama.block_count", 1)
    blocks = np.zeros((8, 256 // 32 * 18), dtype=np.uint8)  # IQ4_NL: 32-element blocks of 18 bytes
    w.add_tensor("blk.0.ffn_up.weight", blocks, raw_dtype=Q.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = open_gguf(p)
    assert f.tensors["blk.0.ffn_up.weight"].shape == (8, 256)
    with pytest.raises(UnsupportedQuantTypeError, match="blk.0.ffn_up.weight: quant type IQ4_NL"):
        validate_tensors(f, None, {"blk.0.ffn_up.weight": (8, 256)})


def test_inspect_prints_summary(tiny_qwen2_gguf: Path, capsys) -> None:
    assert main(["inspect", str(tiny_qwen2_gguf)]) == 0
    out = capsys.readouterr().out
    for text in ("architecture    qwen2", "context length  2048", "Q8_0 x", "F32 x", "gpt2 (pre: qwen2)",
                 "chat template   yes", "2 layers, hidden 64"):
        assert text in out
    assert main(["inspect", "--json", str(tiny_qwen2_gguf)]) == 0
    s = json.loads(capsys.readouterr().out)
    f = open_gguf(tiny_qwen2_gguf)
    assert s["parameters"] == sum(int(np.prod(t.shape)) for t in f.tensors.values())
    assert s["quant_types"] == {"Q8_0": 15, "F32": 11}  # per layer: 7 matrices, 5 norms/biases
    assert s["vocab_size"] == 320


def test_inspect_bad_file_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("orcd inspect: error: bad.gguf: ")


@pytest.mark.parametrize("key,value,text", [
    ("llama.block_count", 2**31, "n_layers=2147483648, outside"),
    ("llama.block_count", 40, "40 layers, but the file holds only"),
    ("llama.context_length", 0, "context_length=0"),
    ("llama.attention.layer_norm_rms_epsilon", float("nan"), "rms_eps=nan"),
    ("llama.rope.freq_base", -1.0, "rope_theta=-1.0"),
    ("llama.rope.dimension_count", 15, "rope_dim=15, which must be even"),
    ("llama.attention.head_count", 3, "does not divide"),
])
def test_config_values_out_of_range(tmp_path: Path, key: str, value, text: str) -> None:
    p = write_model_gguf(tmp_path / "m.gguf", "llama", extra_metadata={key: value}, tokenizer_metadata={},
                         **DIMS)
    with pytest.raises(GGUFError, match=text):
        model_config_from_gguf(open_gguf(p))
