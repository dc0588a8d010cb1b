"""`orcd generate --tensor-parallel N`: N ranks, rank 0 runs the ordinary generate loop.

The parent process resolves the model, reads stdin, checks that the file splits over N ranks, then
spawns the ranks and waits; its exit status is the first failing rank's (0 when all succeed).
"""

from __future__ import annotations

import argparse
import sys

from orcd.distributed.partition import TensorParallelError, check_file_shardable
from orcd.distributed.runtime import launch, resolve_tp_device


def run_tensor_parallel(args: argparse.Namespace) -> int:
    from orcd.engine.default_model import resolve_model
    from orcd.gguf import open_gguf
    from orcd.gguf.config import model_config_from_gguf

    world = args.tensor_parallel
    if world < 1:
        raise TensorParallelError(f"--tensor-parallel {world}: need at least 1 rank")
    device = resolve_tp_device(args.device, world)
    path = resolve_model(args.model)
    f = open_gguf(path)
    check_file_shardable(f, model_config_from_gguf(f), world)
    del f
    rank_args = argparse.Namespace(**vars(args))
    if rank_args.prompt == "-":  # ranks have no stdin: read it here
        rank_args.prompt = sys.stdin.read()
        if rank_args.prompt == "-":  # rank 0 would take it for "read stdin" again
            raise TensorParallelError("a prompt of exactly '-' on stdin is not supported")
    rank_args.model, rank_args.device = str(path), device
    sys.stdout.flush()
    return launch(world, device, generate_rank, (rank_args,))


def generate_rank(ctx, args: argparse.Namespace) -> int:
    """Every rank loads its shard; rank 0 runs generate_cli.run with the shard and a leader engine."""
    import torch

    from orcd.distributed.driver import load_sharded, run_rank
    from orcd.engine import generate_cli

    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_sharded(args.model, ctx, dtype)

    def lead(make_engine) -> int:
        return generate_cli.run(args, load_model=lambda *a, **kw: loaded, engine_cls=make_engine)

    return run_rank(ctx, loaded, lead) or 0
