"""Engine options that `orcd generate` and `orcd serve` share, defined once."""

from __future__ import annotations

import argparse


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """--enforce-eager, --batch-invariant, --tensor-parallel."""
    p.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs: run decode steps eagerly (graphs are CUDA-only anyway)")
    p.add_argument("--batch-invariant", choices=["seeded", "all", "off"], default="seeded",
                   help="CUDA steps run with batch-invariant kernels, so a request's tokens do not depend on "
                        "its batch: seeded = steps holding a request with a seed (default), all = every "
                        "step, off = never (slower kernels while on; the CPU is always invariant)")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="split the model over N ranks (N GPUs with --device cuda, gloo processes on cpu)")
