"""DeviceMirror: one upload of a GGUF file's tensor data; tensors become aligned views of it (the loader
uses it on CUDA; the logic is device-independent, so it is checked here on the CPU)."""

import numpy as np
import pytest

from orcd.gguf import open_gguf
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import _mirror_for
from orcd.models.registry import get_model_class
from orcd.quant.linear import DeviceMirror, raw_to_device


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = write_model_gguf(tmp_path_factory.mktemp("mirror") / "m.gguf", "qwen2", vocab_size=384, hidden=64,
                            n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=128)
    return open_gguf(path)


def section_of(f) -> np.ndarray:
    buf = next(iter(f.tensors.values())).data.base
    while isinstance(buf, np.ndarray) and buf.base is not None:
        buf = buf.base
    return np.frombuffer(buf, dtype=np.uint8, offset=f.data_offset)


def test_every_tensor_is_an_aligned_view_with_its_bytes(gguf_file):
    plain = next(iter(gguf_file.tensors.values()))
    mirror = DeviceMirror(section_of(gguf_file), "cpu")
    tensors = dict(gguf_file.tensors)
    mirror.attach(tensors)
    for t in tensors.values():
        v = raw_to_device(t, "cpu")
        assert v.untyped_storage().data_ptr() == mirror.blob.untyped_storage().data_ptr(), t.name
        assert v.storage_offset() % 32 == 0, t.name
        assert np.array_equal(v.numpy(), t.data.reshape(v.shape)), t.name
    copy = raw_to_device(plain, "cpu")  # no device copy attached: a private copy
    assert copy.untyped_storage().data_ptr() != mirror.blob.untyped_storage().data_ptr()


def test_bytes_outside_the_section_or_other_devices_are_copied(gguf_file):
    mirror = DeviceMirror(section_of(gguf_file), "cpu")
    foreign = np.zeros((4, 34), dtype=np.uint8)  # e.g. llama's un-permuted Q/K rows: a new array
    assert mirror.view(foreign, "cpu") is None
    t = next(iter(gguf_file.tensors.values()))
    assert mirror.view(t.data if t.data.ndim == 2 else t.data.reshape(1, -1), "meta") is None


def test_loader_mirrors_only_kept_quantized_cuda_loads_without_rewritten_rows(gguf_file):
    import torch

    qwen, llama = get_model_class("qwen2"), get_model_class("llama")
    assert _mirror_for(gguf_file, qwen, torch.device("cpu"), True) is None
    assert _mirror_for(gguf_file, llama, torch.device("cuda"), True) is None
    assert _mirror_for(gguf_file, qwen, torch.device("cuda"), False) is None
