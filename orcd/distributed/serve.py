"""`orcd serve --tensor-parallel N`: rank 0 runs the HTTP server and the scheduler, the others follow.

The parent process checks the split, spawns the ranks and forwards SIGTERM/SIGINT to rank 0, which
drains like a single-process server, then releases the followers (ranks > 0 ignore SIGINT, so a
Ctrl-C in the terminal reaches them only through rank 0).
"""

from __future__ import annotations

import argparse
import signal
import sys

from orcd.distributed.runtime import launch, rank_args_for


def run_tensor_parallel(args: argparse.Namespace) -> int:
    world, device, rank_args = rank_args_for(args)
    return launch(world, device, serve_rank, (rank_args,), forward_signals=True)


def serve_rank(ctx, args: argparse.Namespace) -> int:
    import torch

    from orcd.cli import serve as serve_cli
    from orcd.distributed.driver import load_sharded, run_rank

    if ctx.rank != 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_sharded(args.model, ctx, dtype)

    def lead(make_engine) -> int:
        from orcd.engine.async_engine import AsyncEngine

        def build(args, path):
            print(f"orcd serve: rank 0 of {ctx.world} loaded {loaded.cfg.arch} in {loaded.load_seconds:.2f} "
                  f"s on {loaded.device}, {loaded.weights_bytes / 2**20:.1f} MiB of weights (its shard)",
                  file=sys.stderr, flush=True)
            return AsyncEngine(make_engine(loaded, kv_fraction=args.kv_fraction,
                                           num_kv_blocks=args.num_kv_blocks, max_num_seqs=args.max_num_seqs,
                                           max_num_batched_tokens=args.max_num_batched_tokens))

        return serve_cli.run(args, build=build)

    return run_rank(ctx, loaded, lead) or 0
