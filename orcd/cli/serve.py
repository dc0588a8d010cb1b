"""`orcd serve`: load a model once, then serve it over HTTP until SIGTERM/SIGINT.

The model loads (progress on stderr) before the port is bound, so a reachable port means a loaded
model; /health says 503 until the warm-up generation has run, and again while draining.
With several models (`--model` twice, `--models-dir`, or `--model-idle-timeout`), each loads on first
use into its own engine (orcd/server/model_pool.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import time
from pathlib import Path

from orcd import env
from orcd.cli.options import ALL_REDUCE_REFUSED, TP_SPLIT_REFUSED, add_engine_options, prefix_tokens_arg
from orcd.cli.serve_http import HttpOptions, serve_app
from orcd.distributed.runtime import launch, rank_args_for
from orcd.errors import OrcdError
from orcd.hub import resolve_model_path
from orcd.server.settings import ServerSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None, dest="models", metavar="[NAME=]MODEL",
                   help="GGUF path or hf:REPO/FILE, served as NAME or its file stem (default: the bundled "
                        "demo model); repeat it to serve several models, loaded on first use")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="serve every *.gguf in DIR too, each under its file stem, loaded on first use")
    p.add_argument("--max-loaded-models", type=int, default=4, metavar="N",
                   help="several models: at most N loaded at once; past it the least recently used idle "
                        "model is unloaded (0 = no limit; default 4)")
    p.add_argument("--model-idle-timeout", type=float, default=None, metavar="SECONDS",
                   help="unload a model no request has used for SECONDS (default: never); with one "
                        "--model it too then loads on first use")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"],
                   help="compute dtype (auto: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--api-key", default=None,
                   help="require this key on every route but /health (default: $ORCD_API_KEY)")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: file stem)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests that may wait beyond the running slots; more get 503 + Retry-After")
    p.add_argument("--max-num-seqs", type=int, default=64, help="sequences decoded together")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget of one step")
    p.add_argument("--min-prefix-hit", type=prefix_tokens_arg, default=None, metavar="TOKENS",
                   help="a cached prompt prefix shorter than this is recomputed, so the step can replay a "
                        "prefill CUDA graph (a step holding a cached prefix runs eagerly); default 64 where "
                        "prefill graphs run, else 0 (every hit taken)")
    p.add_argument("--kv-fraction", type=float, default=0.7,
                   help="share of free device memory for the KV cache")
    p.add_argument("--num-kv-blocks", type=int, default=None,
                   help="fix the KV pool size (blocks of 16 tokens)")
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024, help="larger bodies get 413")
    p.add_argument("--ping-interval", type=float, default=5.0, help="seconds of silence before `: ping`")
    p.add_argument("--shutdown-grace", type=float, default=30.0,
                   help="on SIGTERM, seconds in-flight streams may run before they are cancelled")
    p.add_argument("--cors-origin", action="append", default=[], help="allowed CORS origin (repeatable)")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up generation")
    p.add_argument("--http", default="auto", choices=["auto", "h11", "httptools"],
                   help="HTTP/1.1 parser (auto: httptools when installed, else the pure-Python h11)")
    p.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"],
                   help="event loop (auto: uvloop when installed, else asyncio)")
    p.add_argument("--gil-switch-interval", type=float, default=None, metavar="SECONDS",
                   help="sys.setswitchinterval for this process (default: Python's 0.005): how long the "
                        "engine thread may wait for the GIL while the HTTP loop holds it")
    p.add_argument("--api-processes", type=int, default=1, metavar="N",
                   help="N API processes (HTTP, chat templates, tokenization, SSE) over one engine process, "
                        "sharing the port (default 1: on the H100 one kept up with the 0.5B at 64 streams, "
                        "docs/performance.md; more when per-request work is the limit; one model only)")
    p.add_argument("--engine-process", action=argparse.BooleanOptionalAction, default=None,
                   help="run each model's engine step loop in a process of its own, so HTTP work never "
                        "holds its GIL (default: $ORCD_ENGINE_PROCESS, else on with CUDA, off on the CPU)")
    add_engine_options(p)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _settings(args: argparse.Namespace, api_key: str | None) -> ServerSettings:
    if args.max_queue < 0 or args.max_body_bytes < 1 or args.ping_interval <= 0 or args.shutdown_grace < 0:
        raise OrcdError("--max-queue, --max-body-bytes, --ping-interval, --shutdown-grace must be positive")
    if args.max_loaded_models < 0 or (args.model_idle_timeout is not None and args.model_idle_timeout <= 0):
        raise OrcdError("--max-loaded-models must be >= 0 and --model-idle-timeout positive")
    return ServerSettings(served_model_name=args.served_model_name, api_key=api_key,
                          max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                          ping_interval_s=args.ping_interval, shutdown_grace_s=args.shutdown_grace,
                          cors_origins=tuple(args.cors_origin), warmup=not args.no_warmup,
                          max_loaded_models=args.max_loaded_models,
                          model_idle_timeout_s=args.model_idle_timeout)


def _several(args: argparse.Namespace) -> bool:
    """Several models (a pool loading on demand) rather than one model loaded before the port is bound."""
    return len(args.models or []) > 1 or args.models_dir is not None or args.model_idle_timeout is not None


def _pool(args: argparse.Namespace, settings: ServerSettings):
    from orcd.server.model_pool import ModelPool
    from orcd.server.model_specs import model_specs

    if args.served_model_name is not None:
        raise OrcdError("--served-model-name names the one model: with several, use --model NAME=PATH")
    if getattr(args, "tensor_parallel", 1) != 1:
        raise OrcdError("--tensor-parallel serves one model: not with several models")
    specs = model_specs(args.models, args.models_dir)
    names = ", ".join(s.name for s in specs)
    print(f"orcd serve: {len(specs)} model(s), loaded on first use: {names}", file=sys.stderr, flush=True)
    return ModelPool(specs, lambda spec: build_engine(args, spec.path), settings)


def engine_build(args: argparse.Namespace, path: Path):
    """How to load `path` and build its engine, from the command line's engine options."""
    from orcd.engine.core_process import EngineBuild

    return EngineBuild(Path(path), device=args.device, dtype=args.dtype, kv_fraction=args.kv_fraction,
                       num_kv_blocks=args.num_kv_blocks, max_num_seqs=args.max_num_seqs,
                       max_num_batched_tokens=args.max_num_batched_tokens, enforce_eager=args.enforce_eager,
                       batch_invariant=args.batch_invariant, dense_batch_rows=args.dense_batch_rows,
                       min_prefix_hit=args.min_prefix_hit, q6k_layout=args.q6k_layout,
                       overlap=args.overlap)


def use_engine_process(args: argparse.Namespace) -> bool:
    """--engine-process / --no-engine-process, else $ORCD_ENGINE_PROCESS, else on with CUDA and off on the
    CPU (measured: bench/results/serving.md; on the CPU the engine's torch threads and the HTTP loop
    share a few cores either way, and each process start costs seconds)."""
    chosen = getattr(args, "engine_process", None)
    chosen = env.engine_process() if chosen is None else chosen
    if chosen is not None:
        return bool(chosen)
    from orcd.loading.loader import resolve_device

    return resolve_device(args.device).type == "cuda"


def build_engine(args: argparse.Namespace, path: Path):
    """An AsyncEngine (the step loop on a thread of this process) or a ProcessEngine (in its own)."""
    build = engine_build(args, path)
    if use_engine_process(args):
        from orcd.engine.core_client import ProcessEngine

        return ProcessEngine.spawn(build)
    from orcd.engine.async_engine import AsyncEngine

    return AsyncEngine(build.build())


def http_options(args: argparse.Namespace) -> HttpOptions:
    return HttpOptions(host=args.host, port=args.port, http=args.http, loop=args.loop,
                       log_level=args.log_level, gil_switch_interval=args.gil_switch_interval)


def run(args: argparse.Namespace, build=None) -> int:
    """build(args, path) -> AsyncEngine: the hook tensor parallelism's rank 0 uses (default: build_engine)."""
    several = _several(args)
    if not several:
        from orcd.server.model_specs import split_alias

        alias, args.model = split_alias(args.models[0]) if args.models else (None, None)
        args.served_model_name = args.served_model_name or alias
    if args.api_processes != 1:
        return run_several_api_processes(args, several)
    if getattr(args, "tensor_parallel", 1) == 1 and getattr(args, "all_reduce", "nccl") != "nccl":
        raise OrcdError(ALL_REDUCE_REFUSED)
    if getattr(args, "tensor_parallel", 1) != 1 and build is None and not several:
        if args.dense_batch_rows not in (None, "auto"):
            raise OrcdError("--dense-batch-rows is for one GPU: not with --tensor-parallel")
        if args.min_prefix_hit is not None:
            raise OrcdError("--min-prefix-hit is for one GPU: not with --tensor-parallel")
        if args.q6k_layout == "split":
            raise OrcdError(TP_SPLIT_REFUSED)
        return run_tensor_parallel(args)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_key = args.api_key or env.api_key()
    settings = _settings(args, api_key)
    t0 = time.perf_counter()
    if several:
        engine = _pool(args, settings)
    else:
        path = resolve_model_path(args.model)  # None -> the demo model
        engine = (build or build_engine)(args, path)
        if settings.served_model_name is None:
            settings = dataclasses.replace(settings, served_model_name=path.stem)
    return serve_app(engine, settings, http_options(args), t0)


def run_several_api_processes(args: argparse.Namespace, several: bool) -> int:
    """--api-processes N: this process supervises N API processes over one engine process."""
    chosen = args.engine_process if args.engine_process is not None else env.engine_process()
    if args.api_processes < 1:
        raise OrcdError("--api-processes must be at least 1")
    if several or getattr(args, "tensor_parallel", 1) != 1 or chosen is False:
        raise OrcdError("--api-processes N > 1 serves one model from an engine process: not with several "
                        "models, --tensor-parallel or --no-engine-process")
    from orcd.cli.serve_procs import run_api_processes

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(args, args.api_key or env.api_key())
    t0 = time.perf_counter()
    path = resolve_model_path(args.model)  # None -> the demo model
    settings = dataclasses.replace(settings, served_model_name=settings.served_model_name or path.stem)
    return run_api_processes(engine_build(args, path), settings, http_options(args), args.api_processes, t0)


# --tensor-parallel N: the parent spawns N ranks; rank 0 runs `run` above with its shard.

def run_tensor_parallel(args: argparse.Namespace) -> int:
    world, device, rank_args = rank_args_for(args)
    return launch(world, device, serve_rank, (rank_args,), forward_signals=True)


def serve_rank(ctx, args: argparse.Namespace) -> int:
    import torch

    from orcd.distributed.driver import load_sharded, run_rank

    if ctx.rank != 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx.all_reduce = getattr(args, "all_reduce", "nccl")  # the decode graphs' residual all-reduce
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_sharded(args.model, ctx, dtype, q6k_layout=args.q6k_layout)

    def lead(make_engine) -> int:
        from orcd.engine.async_engine import AsyncEngine

        def build(args, path):
            print(f"orcd serve: rank 0 of {ctx.world} loaded {loaded.cfg.arch} in {loaded.load_seconds:.2f} "
                  f"s on {loaded.device}, {loaded.weights_bytes / 2**20:.1f} MiB of weights (its shard)",
                  file=sys.stderr, flush=True)
            return AsyncEngine(make_engine(loaded, kv_fraction=args.kv_fraction,
                                           num_kv_blocks=args.num_kv_blocks, max_num_seqs=args.max_num_seqs,
                                           max_num_batched_tokens=args.max_num_batched_tokens,
                                           batch_invariant=args.batch_invariant))

        return run(args, build=build)

    return run_rank(ctx, loaded, lead) or 0
