"""The hardened reader: valid files read like gguf.GGUFReader reads them; each bad file gets its own
one-line GGUFError."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf_layout import find, header_fields, patch

from orcd.errors import GGUFError, UnsupportedQuantTypeError
from orcd.gguf import open_gguf
from orcd.gguf.config import model_config_from_gguf
from orcd.gguf.synth import write_model_gguf


def write(tmp_path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def load_error(tmp_path: Path, data: bytes, exc: type[Exception] = GGUFError) -> str:
    with pytest.raises(exc) as info:
        open_gguf(write(tmp_path, data))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("bad.gguf: ")
    return msg


def test_matches_gguf_reader(tiny_qwen2_gguf: Path) -> None:
    f = open_gguf(tiny_qwen2_gguf)
    ref = GGUFReader(tiny_qwen2_gguf)
    assert f.metadata == {k: v.contents() for k, v in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(f.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = f.tensors[t.name]
        assert mine.shape == tuple(reversed(t.shape.tolist())) and int(mine.qtype) == int(t.tensor_type)
        assert np.array_equal(mine.data.reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1))
    assert f.version == 3 and f.architecture == "qwen2" and f.file_size == tiny_qwen2_gguf.stat().st_size
    emb = f.tensors["token_embd.weight"]
    assert emb.data.shape == (320, 64 // 32 * 34) and not emb.data.flags.writeable


@pytest.mark.parametrize("cut", [0, 3, 10, 23, 200, 5000, -1000, -1])
def test_truncated(tmp_path: Path, tiny_qwen2_gguf: Path, cut: int) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    msg = load_error(tmp_path, data[:cut])
    assert any(t in msg for t in ("truncated", "too short", "past the end", "more than the file")), msg


def test_empty_and_missing(tmp_path: Path) -> None:
    assert "too short" in load_error(tmp_path, b"")
    with pytest.raises(GGUFError, match="cannot read"):
        open_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="cannot read"):
        open_gguf(tmp_path)


def test_wrong_magic(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    assert "not a GGUF file" in load_error(tmp_path, b"GGML" + tiny_qwen2_gguf.read_bytes()[4:])


@pytest.mark.parametrize("version,text", [(1, "unsupported GGUF version 1"), (4, "version 4"),
                                          (3 << 24, "big-endian")])
def test_unsupported_version(tmp_path: Path, tiny_qwen2_gguf: Path, version: int, text: str) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    assert text in load_error(tmp_path, data[:4] + struct.pack("<I", version) + data[8:])


@pytest.mark.parametrize("kind,value,text", [
    ("n_tensors", 2**62, "tensors, more than the file"),
    ("n_kv", 2**64 - 1, "metadata entries, more than the file"),
    ("n_kv", 1000, "truncated|more than"),
    ("key_len", 2**40, "more than"),
    ("vtype", 13, "invalid value type 13"),
    ("arr_type", 9, "nested array"),
    ("arr_type", 77, "invalid element type"),
    ("arr_len", 2**63, "more than the file holds"),
    ("str_len", 2**63 + 5, "truncated file: value of general.architecture needs"),
    ("name_len", 5000, "more than 1024"),
    ("n_dims", 7, "7 dimensions"),
    ("dim", 0, "dimension of 0"),
    ("dim", 2**40, "too many elements|past the end"),
    ("dim", 33, "whole number of"),
    ("toffset", 2**40, "past the end"),
    ("toffset", 4, "not aligned"),
])
def test_corrupt_header_field(tmp_path: Path, tiny_qwen2_gguf: Path, kind: str, value: int,
                              text: str) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    msg = load_error(tmp_path, patch(data, find(header_fields(data), kind), value))
    assert any(t in msg for t in text.split("|")), msg


def test_unknown_quant_type(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    field = find(header_fields(data), "ttype", "blk.0.ffn_up.weight")
    msg = load_error(tmp_path, patch(data, field, 99), UnsupportedQuantTypeError)
    assert "blk.0.ffn_up.weight" in msg and "unknown GGML type 99" in msg


def test_duplicate_tensor_name(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    # blk.0.ffn_up -> blk.0.ffn_gate (same length): the second one is a duplicate
    i = data.index(b"blk.0.ffn_up.weight")
    bad = data[:i] + b"blk.0.ffn_dn.weight" + data[i + 19 :]
    j = bad.index(b"blk.0.ffn_down.weight")
    bad = bad[:j] + b"blk.0.ffn_gate.weight" + bad[j + 21 :]
    assert "appears twice" in load_error(tmp_path, bad)


@pytest.mark.parametrize("align", [0, 48, 2**30, "x"])
def test_bad_alignment(tmp_path: Path, align) -> None:
    p = write_model_gguf(tmp_path / "bad.gguf", "qwen2", extra_metadata={"general.alignment": align},
                         tokenizer_metadata={}, vocab_size=64, hidden=32, n_layers=1, ffn=32, n_heads=2,
                         n_kv_heads=1)
    with pytest.raises(GGUFError, match="general.alignment=.* is not a power of two"):
        open_gguf(p)


def test_invalid_utf8_key(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    i = data.index(b"general.name")
    assert "not valid UTF-8" in load_error(tmp_path, data[:i] + b"\xff" + data[i + 1 :])


def test_missing_metadata_key(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    key = b"qwen2.block_count"
    i = data.index(key)
    f = open_gguf(write(tmp_path, data[:i] + b"qwen2.block_cnnnt" + data[i + len(key) :]))
    with pytest.raises(GGUFError, match="missing metadata key qwen2.block_count"):
        model_config_from_gguf(f)
    j = data.index(b"general.architecture")
    f = open_gguf(write(tmp_path, data[:j] + b"general.architectur_" + data[j + 20 :], "x.gguf"))
    with pytest.raises(GGUFError, match="missing metadata key general.architecture"):
        _ = f.architecture


def _token_fields(data: bytes) -> list:
    return [f for f in header_fields(data) if f.kind == "str_len" and f.label == "tokenizer.ggml.tokens"]


@pytest.mark.parametrize(("k", "value", "text"), [
    (7, 2**64 - 1, "tokenizer.ggml.tokens[7] claims"),
    (0, 2**40, "tokenizer.ggml.tokens[0] claims"),
    (-1, 10**7, "tokenizer.ggml.tokens[319] claims"),
])
def test_string_array_length_past_the_end(tmp_path: Path, tiny_qwen2_gguf: Path, k: int, value: int,
                                          text: str) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    assert text in load_error(tmp_path, patch(data, _token_fields(data)[k], value))


def test_string_array_cut_anywhere(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    # the file ends inside the token array: inside a length field, or inside a string
    data = tiny_qwen2_gguf.read_bytes()
    f = _token_fields(data)[100]
    for cut in (f.offset + 3, f.offset + 8 + 1):
        msg = load_error(tmp_path, data[:cut])
        assert "tokenizer.ggml.tokens" in msg and ("runs past the end" in msg or "claims" in msg), msg


def test_string_array_invalid_utf8_names_the_element(tmp_path: Path, tiny_qwen2_gguf: Path) -> None:
    data = tiny_qwen2_gguf.read_bytes()
    f = _token_fields(data)[42]
    bad = data[: f.offset + 8] + b"\xc3" + data[f.offset + 9 :]  # a lead byte, then no continuation
    assert "tokenizer.ggml.tokens[42] is not valid UTF-8" in load_error(tmp_path, bad)
