"""Rank functions for the tensor-parallel tests (module-level, so spawned ranks can import them)."""

from __future__ import annotations

import json

from orcd.distributed.driver import load_sharded, run_rank
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams

ENGINE_KW = dict(num_kv_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=16)


def lead_and_write(ctx, loaded, lead, out_path: str) -> int:
    """run_rank(ctx, loaded, lead) on every rank; rank 0 writes what lead returned to out_path as JSON."""
    res = run_rank(ctx, loaded, lead)
    if ctx.rank == 0:
        with open(out_path, "w") as f:
            json.dump(res, f)
    return 0


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
    """Every rank loads each model's shard; rank 0 generates and writes {name: tokens} to out_path, and
    {"executors": {name: steps by executor}} (which ran: eager, decode_graph) and {"overlapped": {name:
    steps launched before the step before's tokens were read}} (TPRunner.launch)."""
    results, executors, overlapped = {}, {}, {}
    for name, path in paths.items():
        loaded = load_sharded(path, ctx, dtype)

        def lead(make_engine, loaded=loaded):
            engine = make_engine(loaded, **ENGINE_KW)
            tokens = greedy_tokens(engine, prompts, n_tokens)
            return tokens, dict(engine.runner.steps_by_executor), engine.overlapped_steps

        if ctx.rank == 0:
            results[name], executors[name], overlapped[name] = run_rank(ctx, loaded, lead)
        else:
            run_rank(ctx, loaded, lead)
    results["executors"], results["overlapped"] = executors, overlapped
    if ctx.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    return 0


SEEDED = SamplingParams(max_tokens=24, temperature=0.8, top_k=40, seed=7, ignore_eos=True)


def seeded_tokens(engine, prompts: list[list[int]]) -> list[int]:
    """The first prompt with SEEDED, the others greedy beside it; returns the first one's tokens."""
    engine.add_request(EngineRequest("seeded", prompts[0], SEEDED))
    for i, ids in enumerate(prompts[1:]):
        engine.add_request(EngineRequest(f"o{i}", ids, SamplingParams(max_tokens=24, temperature=0.0,
                                                                      ignore_eos=True)))
    out = []
    while engine.has_work():
        for ev in engine.step():
            assert ev.error is None, ev.error
            if ev.request_id == "seeded" and ev.token_id is not None:
                out.append(ev.token_id)
    return out


def seeded_rank(ctx, path: str, prompts, out_path: str, policy: str = "seeded") -> int:
    """Rank 0 writes {"alone": tokens, "batched": tokens, "policy": the runner's} for a seeded request run
    alone and among the other prompts (one engine each)."""
    loaded = load_sharded(path, ctx)

    def lead(make_engine):
        res = {}
        for key, batch in (("alone", prompts[:1]), ("batched", prompts)):
            engine = make_engine(loaded, batch_invariant=policy, **ENGINE_KW)
            res[key] = seeded_tokens(engine, batch)
        res["policy"] = engine.runner.invariant_policy
        return res

    return lead_and_write(ctx, loaded, lead, out_path)


def ordered_sum_rank(ctx, out_path: str) -> int:
    """Every rank contributes rows (rank + 1) * 0.1 + row / 7; rank 0 writes ordered_all_reduce's sums for
    4 rows and for the first row alone."""
    import torch

    from orcd.distributed.layers import ordered_all_reduce

    y = (ctx.rank + 1) * 0.1 + torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8) / 7
    full = ordered_all_reduce(y, ctx.group)
    one = ordered_all_reduce(y[:1].contiguous(), ctx.group)
    if ctx.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"full": full.tolist(), "one": one.tolist()}, f)
    return 0


def fused_steps(dec, cfg, device, dtype, batch: int = 3, steps: int = 4):
    """`steps` decode steps of `batch` sequences from position 0 through dec (a FusedDecoder or a
    TPFusedDecoder) over a fresh K/V cache of cfg's heads -> logits [steps, batch, V] float32 (CPU)."""
    import torch

    from orcd.models.kv_cache import KVCache
    from orcd.models.layers.attention import AttnMetadata

    page = 16
    kv = KVCache.allocate(cfg, batch * 2, page, device, dtype)
    tables = torch.arange(batch * 2, dtype=torch.int32, device=device).view(batch, 2)
    pos, out = torch.zeros(batch, dtype=torch.int64, device=device), []
    for step in range(steps):
        slots = tables.gather(1, (pos // page)[:, None].int()).view(-1).long() * page + pos % page
        meta = AttnMetadata(cu_seqlens_q=torch.arange(batch + 1, dtype=torch.int32, device=device),
                            seq_lens=(pos + 1).int(), block_tables=tables, slot_mapping=slots,
                            max_query_len=1, max_seq_len=int(pos.max()) + 1)
        ids = (torch.arange(batch, device=device) * 37 + step * 11) % cfg.vocab_size
        out.append(dec(ids, pos, meta, kv).float().cpu())
        pos = pos + 1
    return torch.stack(out)


def fused_int8_rank(ctx, path: str, out_path: str, all_reduce: str = "nccl", batch: int = 3,
                    q6k_layout: str = "auto") -> int:
    """Every rank: the bf16 shard's TPFusedDecoder (int8 products; all_reduce: its residual
    all-reduce) for fused_steps of `batch` rows; rank 0 saves {"logits": [steps, batch, V], "int8": flags,
    "all_reduce": the kind in use, "split": {rank: names of its QuantLinears in the split Q6_K layout}}
    to out_path."""
    import torch
    import torch.distributed as dist

    from orcd.distributed.fused_tp import TPFusedDecoder
    from orcd.quant.linear import QuantLinear
    from orcd.runner.decode_products import I8_MAX_ROWS

    loaded = load_sharded(path, ctx, torch.bfloat16, tokenizer=False, q6k_layout=q6k_layout)  # no tokenizer
    split = sorted(n for n, m in loaded.model.named_modules()
                   if isinstance(m, QuantLinear) and m.layout == "split")
    every = [None] * ctx.world
    dist.all_gather_object(every, split, group=ctx.control)
    dec = TPFusedDecoder(loaded.model, ctx.rank, ctx.group, all_reduce=all_reduce)
    flags = [dec.fuse_norm, dec.products.int8_x, dec.fused_rows() == I8_MAX_ROWS]
    with torch.inference_mode():
        logits = fused_steps(dec, loaded.cfg, ctx.device, torch.bfloat16, batch=batch)
    if ctx.rank == 0:
        torch.save({"logits": logits, "int8": flags, "all_reduce": dec.all_reduce_kind,
                    "split": dict(enumerate(every))}, out_path)
    return 0


def guided_rank(ctx, path: str, out_path: str) -> int:
    """Rank 0 runs tests/structured/test_guided_overlap.py's requests (grammar rows greedy, seeded, top-p,
    with penalties and logprobs; free rows; a stop token) through two leader engines, one step at a time
    and overlapped, then the overlapped one again with aborts, arrivals and preemption; writes {"serial",
    "overlap", "churn": [per request [token, logprob], finish reasons], "overlapped": steps}."""
    from tests.structured.test_guided_overlap import requests, run

    loaded = load_sharded(path, ctx)

    def lead(make_engine):
        prompt = loaded.tokenizer.encode("give me json")
        res, overlapped = {}, {}
        for key, overlap in (("serial", False), ("overlap", True)):
            engine = make_engine(loaded, num_kv_blocks=256, max_num_seqs=16, overlap=overlap)
            res[key] = run(engine, requests(prompt))
            overlapped[key] = engine.overlapped_steps
        engine = make_engine(loaded, num_kv_blocks=12, block_size=4, max_num_seqs=16)
        later = [EngineRequest(f"late-{r.request_id}", r.prompt_token_ids, r.sampling)
                 for r in requests(prompt, free=0)[:3]]
        res["churn"] = run(engine, requests(prompt), aborts={4: "json-greedy", 7: "free1"}, later=later)
        overlapped["churn"] = engine.overlapped_steps
        res["preemptions"] = engine.stats()["num_preemptions"]
        return {**res, "overlapped": overlapped}

    return lead_and_write(ctx, loaded, lead, out_path)


def arrival_tokens(engine, prompts: list[list[int]], n_tokens: int = 6) -> list[list[int]]:
    """Greedy tokens of each prompt, prompt i + 1 arriving two steps after prompt i (a fresh prompt beside
    decode rows: a split step when graphs are on)."""
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}

    def step():
        for ev in engine.step():
            assert ev.error is None, ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)

    for i, ids in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{i}", ids, SamplingParams(max_tokens=n_tokens, temperature=0.0,
                                                                      ignore_eos=True)))
        for _ in range(2):
            step()
    while engine.has_work():
        step()
    return [out[f"r{i}"] for i in range(len(prompts))]


def prefill_graph_rank(ctx, path: str, prompts, out_path: str) -> int:
    """bfloat16 at every rank: rank 0 writes {"graphs": tokens, "eager": tokens, "<key>_executors": steps
    by executor} for the prompts (arrival_tokens) with prefill graphs (every rank captures them at start)
    and without, one engine each."""
    import torch

    loaded = load_sharded(path, ctx, torch.bfloat16)

    def lead(make_engine):
        res = {}
        for key, on in (("graphs", True), ("eager", False)):
            engine = make_engine(loaded, prefill_graphs=on, num_kv_blocks=64, block_size=16, max_num_seqs=8,
                                 max_num_batched_tokens=256)
            res[key] = arrival_tokens(engine, prompts)
            res[f"{key}_executors"] = dict(engine.runner.steps_by_executor)
        return res

    return lead_and_write(ctx, loaded, lead, out_path)
