"""`orcd generate --tensor-parallel N`: N ranks, rank 0 runs the ordinary generate loop.

The parent process resolves the model, reads stdin, checks that the file splits over N ranks, then
spawns the ranks and waits; its exit status is the first failing rank's (0 when all succeed).
"""

from __future__ import annotations

import argparse
import sys

from orcd.distributed.partition import TensorParallelError
from orcd.distributed.runtime import launch, rank_args_for


def run_tensor_parallel(args: argparse.Namespace) -> int:
    world, device, rank_args = rank_args_for(args)
    if rank_args.prompt == "-":  # ranks have no stdin: read it here
        rank_args.prompt = sys.stdin.read()
        if rank_args.prompt == "-":  # rank 0 would take it for "read stdin" again
            raise TensorParallelError("a prompt of exactly '-' on stdin is not supported")
    sys.stdout.flush()
    return launch(world, device, generate_rank, (rank_args,))


def generate_rank(ctx, args: argparse.Namespace) -> int:
    """Every rank loads its shard; rank 0 runs generate_cli.run with the shard and a leader engine."""
    import torch

    from orcd.cli import generate as generate_cli
    from orcd.distributed.driver import load_sharded, run_rank

    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_sharded(args.model, ctx, dtype)

    def lead(make_engine) -> int:
        return generate_cli.run(args, load_model=lambda *a, **kw: loaded, engine_cls=make_engine)

    return run_rank(ctx, loaded, lead) or 0
