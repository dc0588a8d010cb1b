"""`orcd synth --like NAME [--quant TYPE] OUT.gguf`: write a random-weight GGUF shaped like a real model."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from gguf import LlamaFileType

from orcd.gguf.presets import PRESETS, plan_qtypes
from orcd.gguf.synth import tensor_shapes, write_model_gguf


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--like", required=True, choices=sorted(PRESETS), help="model shape to copy")
    p.add_argument("--quant", default=None,
                   help="Q4_K_M (llama.cpp-like mix) or one GGML type (F32, F16, BF16, Q8_0, Q4_K...); "
                        "default: the preset's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("out", help="output .gguf path")


def synth_like(out: str, like: str, quant: str | None = None, seed: int = 0,
               context_length: int | None = None):
    """Write preset `like` to `out`; returns (path, {qtype name: tensor count})."""
    preset = dict(PRESETS[like])
    quant = quant or preset.pop("quant")
    preset.pop("quant", None)
    if context_length:
        preset["context_length"] = context_length
    if preset["arch"] == "gpt-oss":  # mixture of experts: its own layout, writer and MXFP4 plan
        from orcd.gguf.synth_gpt_oss import synth_gpt_oss_like

        return synth_gpt_oss_like(out, like, quant, seed, preset)
    extra = preset.pop("metadata", {})  # architecture keys beyond the shapes (e.g. a sliding window)
    shapes = tensor_shapes(preset["arch"], preset["vocab_size"], preset["hidden"], preset["n_layers"],
                           preset["ffn"], preset["n_heads"], preset["n_kv_heads"], preset["tied"],
                           preset.get("head_dim"))
    qtypes = plan_qtypes(shapes, quant, preset["n_layers"])
    arch = preset.pop("arch")
    md = {"general.name": f"orcd-synth-{like}-{quant}", **extra}
    ftype = {"F32": "ALL_F32"}.get(quant.upper(), f"MOSTLY_{quant.upper()}")
    if ftype in LlamaFileType.__members__:  # what llama.cpp's quantize would record
        md["general.file_type"] = int(LlamaFileType[ftype])
    path = write_model_gguf(out, arch, qtypes=qtypes, seed=seed, extra_metadata=md, **preset)
    return path, Counter(q.name for q in qtypes.values())


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        path, counts = synth_like(args.out, args.like, args.quant, args.seed, args.context_length)
    except (ValueError, OSError) as err:
        print(f"orcd synth: error: {err}", file=sys.stderr)
        return 2
    size = path.stat().st_size
    types = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    secs = time.perf_counter() - t0
    print(f"wrote {path} ({size / 2**20:.1f} MiB, {secs:.1f} s): {types}", file=sys.stderr)
    return 0
