"""GPU bytes of a loaded model vs its GGUF file: every parameter and buffer storage of the model counted
once, and torch.cuda.memory_allocated() around the load (KV cache not included).
Usage: python bench/load/gpu_weights.py MODEL.gguf [--out FILE.json] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from orcd.loading.loader import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--out", default="")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    lm = load_model(a.model, device="cuda", dtype=getattr(torch, a.dtype), tokenizer=False)
    torch.cuda.synchronize()
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in itertools.chain(lm.model.parameters(), lm.model.buffers()) if t.is_cuda}
    size = Path(a.model).stat().st_size
    row = {"model": Path(a.model).name, "file_bytes": size, "tensor_bytes": sum(storages.values()),
           "allocated_bytes": torch.cuda.memory_allocated() - before, "device": torch.cuda.get_device_name()}
    row["tensor_ratio"] = round(row["tensor_bytes"] / size, 4)
    row["allocated_ratio"] = round(row["allocated_bytes"] / size, 4)
    print(json.dumps(row))
    if a.out:
        Path(a.out).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
