"""A smaller file cut from the real Gemma 3 270M: its first layers and vocabulary rows, raw blocks copied
as they are. It fits the GPU machine's 64 MiB working-tree limit where the 253 MB original cannot; its
weights stay real (peaked logits), though the cut model no longer writes sensible text."""

from __future__ import annotations

from pathlib import Path

from gguf import GGUFReader, GGUFValueType, GGUFWriter

from orcd.testmodels import gemma3_270m, models_dir

N_LAYERS, VOCAB = 6, 32768  # 5 sliding-window layers and the first global one
SMALL = f"gemma-3-270m-{N_LAYERS}l-{VOCAB // 1024}k.gguf"
_PER_TOKEN = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def cut_gemma3(src: Path, dst: Path, n_layers: int = N_LAYERS, vocab: int = VOCAB) -> Path:
    r = GGUFReader(src)
    w = GGUFWriter(dst, "gemma3")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "gemma3.block_count":
            value = n_layers
        elif key in _PER_TOKEN:
            value = value[:vocab]
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        w.add_key_value(key, value, main, sub_type=sub)
    for t in r.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk" and int(parts[1]) >= n_layers:
            continue
        data = t.data[:vocab] if t.name == "token_embd.weight" else t.data
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def small_gemma3() -> Path:
    """The cut file, cached beside the real one (made from it on first use)."""
    dst = models_dir() / SMALL
    if not dst.is_file():
        tmp = dst.with_suffix(".tmp")
        cut_gemma3(gemma3_270m(), tmp).replace(dst)
    return dst
