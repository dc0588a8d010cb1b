"""`orcd generate [--model PATH] PROMPT`: stream one completion's text to stdout (diagnostics to stderr).

Without --raw the prompt is wrapped by the model's chat template as a user message (when the file
has one); with --raw, or without a template, it is the plain prefix, BOS as the metadata says.
"""

from __future__ import annotations

import argparse
import sys
import time

from orcd.cli.options import ALL_REDUCE_REFUSED, TP_SPLIT_REFUSED, add_engine_options
from orcd.distributed.partition import TensorParallelError
from orcd.distributed.runtime import launch, rank_args_for
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import OrcdError
from orcd.hub import resolve_model_path

DTYPES = ("auto", "float32", "bfloat16", "float16")
_D = SamplingParams()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="prompt text ('-' reads it from stdin)")
    p.add_argument("--model", default=None,
                   help="GGUF file, or hf:OWNER/REPO/FILE (default: the embedded demo model)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens to generate at most (default: 256, or what fits the context)")
    p.add_argument("--temperature", type=float, default=_D.temperature, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=_D.top_k, help="0 = off")
    p.add_argument("--top-p", type=float, default=_D.top_p, help="1 = off")
    p.add_argument("--min-p", type=float, default=_D.min_p, help="0 = off")
    p.add_argument("--repetition-penalty", type=float, default=_D.repetition_penalty, help="1 = off")
    p.add_argument("--presence-penalty", type=float, default=_D.presence_penalty)
    p.add_argument("--frequency-penalty", type=float, default=_D.frequency_penalty)
    p.add_argument("--seed", type=int, default=None, help="same seed + same prompt -> same text")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable); not printed")
    p.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-generation tokens")
    p.add_argument("--raw", action="store_true", help="no chat template: PROMPT is the plain prefix")
    p.add_argument("--system", default=None, help="system message (chat template only)")
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (CUDA when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="compute dtype (auto: float32 on CPU, bfloat16 on CUDA)")
    add_engine_options(p)
    p.add_argument("--quiet", action="store_true", help="no diagnostics on stderr")


def encode(tokenizer, prompt: str, raw: bool, system: str | None) -> list[int]:
    if raw or not tokenizer.has_chat_template:
        return tokenizer.encode_prompt(prompt)
    messages = [{"role": "system", "content": system}] if system else []
    return tokenizer.encode_chat([*messages, {"role": "user", "content": prompt}])


def sampling_from_args(args: argparse.Namespace, max_tokens: int) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
        seed=args.seed, stop=tuple(args.stop), ignore_eos=args.ignore_eos,
    ).validate()


def run(args: argparse.Namespace, load_model=None, engine_cls=None) -> int:
    """load_model / engine_cls: hooks for tensor parallelism's rank 0 (default: load_model, LLMEngine)."""
    import torch

    if getattr(args, "tensor_parallel", 1) == 1 and getattr(args, "all_reduce", "nccl") != "nccl":
        raise OrcdError(ALL_REDUCE_REFUSED)
    if getattr(args, "tensor_parallel", 1) != 1 and load_model is None:
        if args.dense_batch_rows not in (None, "auto"):
            raise OrcdError("--dense-batch-rows is for one GPU: not with --tensor-parallel")
        if args.q6k_layout == "split":
            raise OrcdError(TP_SPLIT_REFUSED)
        return run_tensor_parallel(args)
    from orcd.engine.llm_engine import LLMEngine
    from orcd.loading.loader import load_model as default_load

    load_model, LLMEngine = load_model or default_load, engine_cls or LLMEngine  # noqa: N806

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    path = resolve_model_path(args.model)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_model(path, device=args.device, dtype=dtype, q6k_layout=args.q6k_layout)
    say(f"orcd: {path.name} ({loaded.cfg.arch}) on {loaded.device}, {loaded.weights_bytes / 2**20:.1f} MiB "
        f"of weights, loaded in {loaded.load_seconds:.2f} s")
    ids = encode(loaded.tokenizer, prompt, args.raw, args.system)
    room = loaded.cfg.context_length - len(ids)
    max_tokens = args.max_tokens if args.max_tokens is not None else max(1, min(256, room))
    sampling = sampling_from_args(args, max_tokens)
    block_size = 16
    engine = LLMEngine(loaded, num_kv_blocks=-(-(len(ids) + max_tokens) // block_size) + 1,
                       block_size=block_size, max_num_seqs=1,
                       max_num_batched_tokens=max(2048, min(len(ids), 8192)),
                       enforce_eager=args.enforce_eager, batch_invariant=args.batch_invariant,
                       dense_batch_rows=args.dense_batch_rows, overlap=args.overlap,
                       warm_prefill_graphs=False)  # one prompt: its one bucket is captured when it runs
    graph = getattr(engine.runner, "graph", None)
    if graph is not None:
        say(f"orcd: captured {len(graph.buckets)} decode CUDA graph(s) in {graph.capture_seconds:.2f} s")
    engine.add_request(EngineRequest("cli", ids, sampling))
    t0 = time.perf_counter()
    t_first = None
    last = None
    while engine.has_work():
        for ev in engine.step():
            if t_first is None:
                t_first = time.perf_counter()
            sys.stdout.write(ev.text)
            sys.stdout.flush()
            last = ev
    if sys.stdout.isatty():
        sys.stdout.write("\n")
    elapsed = time.perf_counter() - t0
    if last is None or last.finish_reason == "error":
        raise OrcdError(f"generation failed: {last.error if last else 'no output'}")
    decode_s = elapsed - (t_first - t0)
    rate = (last.generated_tokens - 1) / decode_s if last.generated_tokens > 1 and decode_s > 0 else 0.0
    say(f"orcd: {len(ids)} prompt tokens, {last.generated_tokens} generated ({last.finish_reason}); "
        f"first token {t_first - t0:.3f} s, decode {rate:.1f} tok/s")
    return 0


# --tensor-parallel N: the parent spawns N ranks; rank 0 runs `run` above with its shard.

def run_tensor_parallel(args: argparse.Namespace) -> int:
    world, device, rank_args = rank_args_for(args)
    if rank_args.prompt == "-":  # ranks have no stdin: read it here
        rank_args.prompt = sys.stdin.read()
        if rank_args.prompt == "-":  # rank 0 would take it for "read stdin" again
            raise TensorParallelError("a prompt of exactly '-' on stdin is not supported")
    sys.stdout.flush()
    return launch(world, device, generate_rank, (rank_args,))


def generate_rank(ctx, args: argparse.Namespace) -> int:
    """Every rank loads its shard; rank 0 runs `run` with the shard and a leader engine."""
    import torch

    from orcd.distributed.driver import load_sharded, run_rank

    ctx.all_reduce = getattr(args, "all_reduce", "nccl")  # the decode graphs' residual all-reduce
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_sharded(args.model, ctx, dtype, q6k_layout=args.q6k_layout)

    def lead(make_engine) -> int:
        return run(args, load_model=lambda *a, **kw: loaded, engine_cls=make_engine)

    return run_rank(ctx, loaded, lead) or 0
