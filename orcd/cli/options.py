"""Engine options that `orcd generate` and `orcd serve` share, defined once."""

from __future__ import annotations

import argparse


def dense_rows_arg(text: str) -> int | str | None:
    """--dense-batch-rows' value: "auto", "off" (None) or a whole number >= 1."""
    if text in ("auto", "off"):
        return None if text == "off" else text
    try:
        rows = int(text)
    except ValueError:
        rows = 0
    if rows < 1:
        raise argparse.ArgumentTypeError(f"must be auto, off or a whole number >= 1 (a decode batch size), "
                                         f"got {text!r}")
    return rows


def prefix_tokens_arg(text: str) -> int:
    """--min-prefix-hit's value: a whole number of tokens >= 0."""
    try:
        tokens = int(text)
    except ValueError:
        tokens = -1
    if tokens < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of tokens >= 0, got {text!r}")
    return tokens


# --q6k-layout split with --tensor-parallel N > 1 (orcd.distributed.driver.check_tp_q6k_layout)
ALL_REDUCE_REFUSED = "--all-reduce symm is for --tensor-parallel N > 1 (one GPU has no all-reduce)"
TP_SPLIT_REFUSED = ("--q6k-layout split is for one GPU: with --tensor-parallel, auto (the default) splits "
                    "the Q6_K weights each rank's decode step reads, after slicing; gguf keeps the file's "
                    "blocks")


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """--enforce-eager, --batch-invariant, --tensor-parallel, --dense-batch-rows, --q6k-layout,
    --all-reduce, --no-overlap."""
    p.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs: run decode steps eagerly (graphs are CUDA-only anyway)")
    p.add_argument("--batch-invariant", choices=["seeded", "all", "off"], default="seeded",
                   help="CUDA steps run with batch-invariant kernels, so a request's tokens do not depend on "
                        "its batch: seeded = steps holding a request with a seed (default), all = every "
                        "step, off = never (slower kernels while on; the CPU is always invariant)")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="split the model over N ranks (N GPUs with --device cuda, gloo processes on cpu)")
    p.add_argument("--dense-batch-rows", type=dense_rows_arg, default="auto", metavar="R|auto|off",
                   help="memory for speed (CUDA): decode batches of >= R sequences run on dense copies of "
                        "the weights (2 bytes a weight in bf16: ~1 GB more for a 0.5B, ~14 GB for a 7B), "
                        "made at start before the KV cache is sized; smaller batches keep the quantized "
                        "kernels. auto (default): R = 4 where the copies take <= 5%% of the GPU's memory, "
                        "else off")
    p.add_argument("--q6k-layout", choices=["auto", "gguf", "split"], default="auto",
                   help="how Q6_K weights sit on the GPU: auto (default) rearranges those the int8 decode "
                        "kernels read into 16-byte-aligned blocks (same bytes, faster at 7B); gguf keeps "
                        "the file's blocks; split rearranges every Q6_K weight (CUDA only, one GPU: "
                        "with --tensor-parallel each rank applies auto after slicing)")
    p.add_argument("--all-reduce", choices=["nccl", "symm"], default="nccl",
                   help="with --tensor-parallel on GPUs: the decode step's residual all-reduce. nccl "
                        "(default), or symm: a one-shot kernel over symmetric memory (NVLink peer loads, no "
                        "multicast): "
                        "72B at 4 GPUs +5%% at one stream, no change at 2 GPUs or at 8+ streams (4 x H200); "
                        "NCCL where it is unavailable, with a warning")
    p.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="run decode steps one at a time: by default the engine launches each decode step "
                        "before it reads the tokens of the one before, so the GPU does not wait for the "
                        "host's work between steps (same tokens either way)")
