"""Loader and registry behaviour: errors, weights actually used, quantized-on-device path."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from gguf import GGUFReader, GGUFWriter
from models_helpers import PROMPTS, orcd_last_logits, write_case

from orcd.errors import GGUFError, UnsupportedArchitectureError
from orcd.loading.loader import load_model
from orcd.models.registry import get_model_class, supported_architectures
from orcd.runner.model_runner import ModelRunner


def test_registry_knows_qwen2_and_llama():
    assert {"qwen2", "llama"} <= set(supported_architectures())
    assert get_model_class("qwen2").qkv_bias and not get_model_class("llama").qkv_bias


def test_unknown_architecture_is_named(tmp_path):
    with pytest.raises(UnsupportedArchitectureError, match="mamba"):
        get_model_class("mamba")
    w = GGUFWriter(tmp_path / "m.gguf", "mamba")
    w.add_uint32("mamba.context_length", 128)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with pytest.raises(UnsupportedArchitectureError, match="'mamba'"):
        load_model(tmp_path / "m.gguf", device="cpu", tokenizer=False)


def _runner(path, **kw):
    return ModelRunner(load_model(path, device="cpu", tokenizer=False, **kw), num_kv_blocks=16, block_size=8)


def test_changing_one_weight_changes_the_output(tmp_path):
    path = write_case(tmp_path, "qwen2-tied-f32")
    before = orcd_last_logits(_runner(path), PROMPTS[0])
    edited = tmp_path / "edited.gguf"
    shutil.copy(path, edited)
    reader = GGUFReader(edited, "r+")
    t = next(t for t in reader.tensors if t.name == "blk.1.ffn_down.weight")
    data = np.asarray(t.data)  # writable memmap view into the file
    data.reshape(-1)[0] += 0.5
    reader.data.flush()
    del reader, data
    after = orcd_last_logits(_runner(edited), PROMPTS[0])
    assert not torch.equal(before, after)
    assert (before - after).abs().max() > 1e-5


@pytest.mark.parametrize("case", ["llama-untied-q8_0", "qwen2-untied-kquant-mix"])
def test_kept_quantized_equals_dequantized(tmp_path, case):
    path = write_case(tmp_path, case)
    dense = orcd_last_logits(_runner(path, keep_quantized=False), PROMPTS[2])
    raw = orcd_last_logits(_runner(path, keep_quantized=True), PROMPTS[2])
    torch.testing.assert_close(raw, dense, rtol=1e-5, atol=1e-5)


def test_loaded_model_reports_device_dtype_bytes(tmp_path):
    path = write_case(tmp_path, "qwen2-untied-f16")
    lm = load_model(path, device="auto" if not torch.cuda.is_available() else "cpu", tokenizer=False)
    assert lm.device.type == "cpu" and lm.dtype == torch.float32
    n_params = sum(np.prod(t.shape) for t in lm.gguf.tensors.values())
    assert lm.weights_bytes == 4 * n_params  # every tensor dense fp32 once, nothing else
    assert lm.load_seconds > 0


def test_tokenizer_comes_from_the_file_metadata(tmp_path):
    lm = load_model(write_case(tmp_path, "llama-tied-f32"), device="cpu")
    assert lm.tokenizer is not None and lm.tokenizer.vocab_size == lm.cfg.vocab_size


def test_shape_contradicting_config_is_rejected(tmp_path):
    from orcd.gguf.synth import write_model_gguf

    bad = tmp_path / "bad.gguf"
    write_model_gguf(bad, "qwen2", vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2,
                     extra_metadata={"qwen2.feed_forward_length": 96})
    with pytest.raises(GGUFError, match="ffn"):
        load_model(bad, device="cpu", tokenizer=False)


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_unpermute_inverts_llama_cpp_convert_permutation(n_heads):
    from gguf import GGMLQuantizationType as Q

    from orcd.gguf.reader import GGUFTensor
    from orcd.models.decoder import unpermute_qk_rows

    rows, cols = n_heads * 8, 3
    hf = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    # convert_hf_to_gguf.py's LlamaModel.permute, applied to HF q/k rows when writing the file
    stored = hf.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)
    weight = GGUFTensor("w", Q.F32, (rows, cols), stored.view(np.uint8).reshape(rows, -1))
    back = unpermute_qk_rows(weight, n_heads).data.view(np.float32).reshape(rows, cols)
    assert np.array_equal(back, hf)
    bias = GGUFTensor("b", Q.F32, (rows,), stored[:, 0].copy().view(np.uint8).reshape(1, -1))
    assert np.array_equal(unpermute_qk_rows(bias, n_heads).data.view(np.float32).reshape(-1), hf[:, 0])


def test_rope_scaling_linear_loads_and_unknown_scaling_is_refused(tmp_path):
    from orcd.gguf.synth import write_model_gguf

    dims = dict(vocab_size=320, hidden=64, n_layers=1, ffn=128, n_heads=4, n_kv_heads=2)
    lin = write_model_gguf(tmp_path / "lin.gguf", "llama", **dims, extra_metadata={
        "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0})
    plain = write_model_gguf(tmp_path / "plain.gguf", "llama", **dims)
    a, b = orcd_last_logits(_runner(lin), PROMPTS[0]), orcd_last_logits(_runner(plain), PROMPTS[0])
    assert not torch.allclose(a, b)  # same weights (same seed), positions rotated at half speed
    yarn = write_model_gguf(tmp_path / "yarn.gguf", "llama", **dims, extra_metadata={
        "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0})
    with pytest.raises(GGUFError, match="yarn"):
        load_model(yarn, device="cpu", tokenizer=False)
