"""The first-forward warm-up (orcd/loading/warmup.py): what it runs, and that it never raises or hangs."""

from __future__ import annotations

import threading

import pytest
import torch

from orcd.cli.synth import synth_like
from orcd.errors import GGUFError
from orcd.gguf import open_gguf
from orcd.gguf.config import model_config_from_gguf
from orcd.loading.loader import load_model
from orcd.loading.warmup import _products, warm_cuda, warm_first_forward


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, _ = synth_like(str(tmp_path_factory.mktemp("w") / "m.gguf"), "tiny-qwen2", "Q8_0")
    return path


def test_products_are_the_distinct_weight_shapes(tiny):
    f = open_gguf(tiny)
    cfg = model_config_from_gguf(f)
    prods = _products(f)
    assert len(prods) == len(set(prods))
    h, kv = cfg.hidden_size, cfg.n_kv_heads * cfg.head_dim
    assert (8, h, h, True) in prods  # attn_q, with its bias (qwen2)
    assert (8, kv, h, True) in prods  # attn_k / attn_v
    assert (8, h, cfg.ffn_size, False) in prods  # ffn_down
    ups = [n for n in f.tensors if n.endswith("ffn_up.weight")]
    assert all((int(f.tensors[n].qtype), cfg.ffn_size, h, False) in prods for n in ups)


def test_warm_up_on_the_cpu_is_harmless(tiny):
    f = open_gguf(tiny)
    ran = warm_first_forward(f, model_config_from_gguf(f), torch.device("cpu"), torch.float32)
    assert ran["layers"]  # torch ops only on the CPU; the products need the GPU (or the interpreter)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the failure path: no CUDA on this machine")
def test_without_cuda_the_warm_up_still_releases_the_main_thread():
    """load_model's main thread waits for `cuda_ready` before its first CUDA call: the event must be set
    even when there is no driver, so that the main thread goes on to raise CUDA's own error."""
    ready = threading.Event()
    steps = warm_cuda(torch.device("cuda"), None, ready, origin=0.0)
    assert ready.is_set() and steps["@warm_ctx"] >= steps["warm_ctx"] >= 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_runs_the_warm_up_and_a_failed_load_does_not_hang(tiny, tmp_path):
    loaded = load_model(tiny, "cuda", tokenizer=False)
    assert loaded.phases["warm_products"] == len(_products(loaded.gguf)) and loaded.phases["warm_layers"] == 1
    assert loaded.timeline["cuda_wait"] >= loaded.timeline["cuda_ready"]  # no CUDA call before the context
    bad = tmp_path / "bad.gguf"
    data = bytearray(open(tiny, "rb").read())
    bad.write_bytes(bytes(data[: len(data) // 2]))  # truncated: the tensor data is missing
    with pytest.raises(GGUFError):
        load_model(str(bad), "cuda", tokenizer=False)
