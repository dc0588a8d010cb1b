"""Engine alone: LLMEngine.step() driven to completion for C concurrent greedy requests."""

from __future__ import annotations

import gc
import time

import torch
from batching_common import Deadline, prompt_ids, split_phases, sync


def kv_blocks_for(max_c: int, prompt_len: int, gen_len: int, block_size: int = 16) -> int:
    """A pool that holds every sequence of the largest round at full length (no preemption), plus slack."""
    per_seq = -(-(prompt_len + gen_len) // block_size)
    return max_c * per_seq + 64


def run_round(engine, prompts: list[list[int]], gen_len: int, deadline: Deadline, tag: str) -> dict:
    """Add every request at once, step() until all finish; time stamps are taken after each step, which
    ends with the sampled ids copied to the host (so the device has finished that step)."""
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams

    sp = SamplingParams(max_tokens=gen_len, temperature=0.0, ignore_eos=True)
    dev = engine.loaded.device
    sync(dev)
    t0 = time.perf_counter()
    for i, ids in enumerate(prompts):
        engine.add_request(EngineRequest(f"{tag}-{i}", ids, sp))
    first: dict[str, float] = {}
    stamps: list[tuple[float, int]] = []
    generated: dict[str, int] = {}
    errors: list[str] = []
    truncated = False
    while engine.has_work():
        if deadline.expired() and not truncated:  # the time guard: end the round at the next step
            truncated = True
            for i in range(len(prompts)):
                engine.abort(f"{tag}-{i}")
        events = engine.step()
        now = time.perf_counter()
        n = 0
        for ev in events:
            if ev.token_id is not None:
                n += 1
                first.setdefault(ev.request_id, now)
            if ev.finished:
                generated[ev.request_id] = ev.generated_tokens
                if ev.error:
                    errors.append(ev.error)
        stamps.append((now, n))
    sync(dev)
    t_end = stamps[-1][0] if stamps else time.perf_counter()
    res = split_phases(t0, list(first.values()), stamps, t_end)
    res.update(concurrency=len(prompts), steps=len(stamps), truncated=truncated, errors=errors[:3],
               min_generated=min(generated.values(), default=0))
    return res


def bench_engine(path: str, device: str, concurrency: list[int], prompt_len: int, gen_len: int,
                 warmup_len: int, max_num_seqs: int, enforce_eager: bool, deadline: Deadline,
                 batch_invariant: str = "seeded", repeat: int = 1) -> dict:
    """`repeat`: measured rounds per concurrency; the one with the median e2e tok/s is kept."""
    from orcd.engine.llm_engine import LLMEngine
    from orcd.loading.loader import load_model

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    loaded = load_model(path, device=device)
    blocks = kv_blocks_for(max(concurrency), prompt_len, gen_len)
    t0 = time.perf_counter()
    engine = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                       batch_invariant=batch_invariant)
    # CUDA graphs of decode steps, captured just now (policy "all": only the batch-invariant ones)
    graph = getattr(engine.runner, "graph", None) or getattr(engine.runner, "graph_invariant", None)
    out: dict = {"load_s": loaded.load_seconds, "engine_init_s": time.perf_counter() - t0,
                 "decode_graphs": None if graph is None else {
                     "buckets": list(graph.buckets), "capture_s": graph.capture_seconds,
                     "fused": bool(getattr(graph, "fused", False))},
                 "batch_invariant": batch_invariant, "weights_MiB": loaded.weights_bytes / 2**20,
                 "num_kv_blocks": blocks, "max_num_seqs": max_num_seqs,
                 "max_num_batched_tokens": engine.scheduler.max_num_batched_tokens, "rounds": {}}
    vocab = loaded.cfg.vocab_size
    t0 = time.perf_counter()
    for c in concurrency:  # warm-up: every batch shape once (Triton compiles, graph captures)
        run_round(engine, prompt_ids(c, prompt_len, vocab, seed=10_000 + c), warmup_len, deadline, f"w{c}")
    out["warmup_s"] = time.perf_counter() - t0
    for c in concurrency:
        if deadline.expired():
            out["rounds"][str(c)] = {"skipped": "time guard (--max-seconds)"}
            continue
        tries = []
        for rep in range(repeat):
            before = engine.stats()
            res = run_round(engine, prompt_ids(c, prompt_len, vocab, seed=c + 7919 * rep), gen_len, deadline,
                            f"c{c}.{rep}")
            after = engine.stats()
            res.update({k: after[k] - before[k] for k in ("num_preemptions", "prefix_cache_hits")})
            tries.append(res)
        res = sorted(tries, key=lambda r: r["e2e_tok_s"] or 0)[len(tries) // 2]
        res["repeats_e2e_tok_s"] = [r["e2e_tok_s"] for r in tries]
        out["rounds"][str(c)] = res
        print(f"engine C={c}: decode {res['decode_tok_s'] or 0:,.0f} tok/s, "
              f"e2e {res['e2e_tok_s'] or 0:,.0f} tok/s, wall {res['wall_s']:.2f} s", flush=True)
    if loaded.device.type == "cuda":
        out["peak_device_MiB"] = torch.cuda.max_memory_allocated(loaded.device) / 2**20
    del engine, loaded
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out
