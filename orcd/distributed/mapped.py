"""The whole model on the host with its quantized weights left in the file's memory map.

load_model(device="cpu") copies every tensor into process memory; with N ranks each loading the full
file before keeping its slice, a 47 GB file (qwen2.5-72b) would cost N x 47 GB of RAM and N full
copies. Here every tensor's raw blocks are zero-copy views of the mmap (GGUFTensor.device_copy, which
orcd.quant.linear.raw_to_device returns as is), so building the model reads nothing; shard_model then
copies only this rank's slices to its device (a row slice reads just its pages; a column slice reads
its bytes of every row). The pages come from the page cache the ranks share.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
import torch

from orcd.gguf import open_gguf
from orcd.gguf.config import model_config_from_gguf
from orcd.gguf.validate import validate_tensors
from orcd.loading.loader import LoadedModel
from orcd.models.registry import get_model_class

CPU = torch.device("cpu")


def _mmap_view(data: np.ndarray) -> torch.Tensor:
    """The bytes of a tensor's (read-only) mmap view as uint8 [rows, row_bytes], no copy.
    Never written: shard.py copies slices (layers._own), the loader dequantizes into new tensors."""
    rows = data if data.ndim == 2 else data.reshape(1, -1)
    with warnings.catch_warnings():  # torch warns that the array is not writable
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(rows.view(np.uint8).reshape(rows.shape[0], -1))


def load_mapped(path, dtype: torch.dtype, tokenizer: bool) -> LoadedModel:
    """The model on the CPU, raw GGUF blocks kept quantized as views of the mmap (weights_bytes 0:
    nothing was copied). Float tensors (norms, biases) are converted into ordinary tensors."""
    t0 = time.perf_counter()
    f = open_gguf(path)
    cls = get_model_class(f.architecture)
    cfg = model_config_from_gguf(f)
    required, optional = cls.expected_tensors(cfg)
    validate_tensors(f, cfg, required, optional)
    # llama's Q/K rows are un-permuted at load into new arrays (decoder.unpermute_qk_rows), which a
    # device_copy would shadow: those stay as the loader makes them (a private copy)
    permuted = ("attn_q.", "attn_k.") if getattr(cls, "qk_rows_permuted", False) else ()
    for name, t in f.tensors.items():
        if not any(p in name for p in permuted):
            f.tensors[name] = dataclasses.replace(t, device_copy=_mmap_view(t.data))
    with torch.no_grad():
        model = cls.from_gguf(f, cfg, CPU, dtype, True).eval()
    tok = None
    if tokenizer:
        from orcd.tokenizer import load_tokenizer

        tok = load_tokenizer(f.metadata)
    return LoadedModel(cfg, model, tok, f, CPU, dtype, 0, time.perf_counter() - t0)
