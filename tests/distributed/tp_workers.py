"""Rank functions for the tensor-parallel tests (module-level, so spawned ranks can import them)."""

from __future__ import annotations

import json

from orcd.distributed.driver import load_sharded, run_rank
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams

ENGINE_KW = dict(num_kv_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=16)


def greedy_tokens(engine, prompts: list[list[int]], n_tokens: int) -> list[list[int]]:
    """All prompts in one engine (batched, chunked prefill with the small token budget)."""
    for i, ids in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{i}", ids, SamplingParams(max_tokens=n_tokens, temperature=0.0,
                                                                      ignore_eos=True)))
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    while engine.has_work():
        for ev in engine.step():
            assert ev.error is None, ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
    return [out[f"r{i}"] for i in range(len(prompts))]


def greedy_rank(ctx, paths: dict[str, str], prompts, n_tokens: int, out_path: str, dtype=None) -> int:
    """Every rank loads each model's shard; rank 0 generates and writes {name: tokens} to out_path."""
    results = {}
    for name, path in paths.items():
        loaded = load_sharded(path, ctx, dtype)

        def lead(make_engine, loaded=loaded):
            return greedy_tokens(make_engine(loaded, **ENGINE_KW), prompts, n_tokens)

        results[name] = run_rank(ctx, loaded, lead)
    if ctx.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    return 0
