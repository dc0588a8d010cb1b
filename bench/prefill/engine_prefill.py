"""Prefill through the engine: one LLMEngine step per prompt (max_tokens=1), prefill CUDA graphs vs eager.

usage: python bench/prefill/engine_prefill.py MODEL.gguf [OUT.json]
(e.g. after `orcd synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/q.gguf`; needs CUDA and triton)

Measures, on the engine's own step loop: load (file -> engine ready, decode graphs included); the first
512-token step (it captures that bucket's graph lazily) and so load-to-first-token; best / median step
time of a 512-token prompt with the graphs and eagerly (runner.prefill_graphs switched off, same
engine); first-use (capture) vs replay vs eager for the other token buckets and for 16 x 128 prompts;
the device memory the captured graphs reserve.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time

import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model

SP = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
_rid = [0]


def run_step(eng: LLMEngine, n_prompts: int, plen: int) -> float:
    """Seconds from adding n fresh random prompts to their (only) token, device synchronized."""
    vocab = eng.cfg.vocab_size
    for _ in range(n_prompts):
        _rid[0] += 1
        ids = [random.randrange(100, vocab - 100) for _ in range(plen)]
        eng.add_request(EngineRequest(f"r{_rid[0]}", ids, SP))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    steps = 0
    while eng.has_work():
        eng.step()
        steps += 1
    torch.cuda.synchronize()
    assert steps == 1, f"{n_prompts} x {plen} took {steps} steps"
    return time.perf_counter() - t0


def timed(eng: LLMEngine, n_prompts: int, plen: int, reps: int) -> dict:
    ts = [run_step(eng, n_prompts, plen) for _ in range(reps)]
    best, med = min(ts), statistics.median(ts)
    return {"best_ms": best * 1e3, "median_ms": med * 1e3, "tok_s_best": n_prompts * plen / best,
            "tok_s_median": n_prompts * plen / med}


def compare(eng: LLMEngine, n_prompts: int, plen: int, reps: int) -> dict:
    """First use (lazy capture) then replays, and the same eagerly."""
    pg = eng.runner.prefill_graphs
    first = run_step(eng, n_prompts, plen)
    res = {"prompts": n_prompts, "prompt_len": plen, "first_use_ms": first * 1e3,
           "graphs": timed(eng, n_prompts, plen, reps)}
    eng.runner.prefill_graphs = None
    for _ in range(3):  # warm
        run_step(eng, n_prompts, plen)
    res["eager"] = timed(eng, n_prompts, plen, reps)
    eng.runner.prefill_graphs = pg
    res["speedup"] = res["graphs"]["tok_s_best"] / res["eager"]["tok_s_best"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="GGUF file")
    ap.add_argument("out", nargs="?", default="bench/results/prefill_engine.json", help="result JSON")
    args = ap.parse_args()
    path, out_path = args.model, args.out
    random.seed(0)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    t0 = time.perf_counter()
    loaded = load_model(path, device="cuda")
    eng = LLMEngine(loaded, num_kv_blocks=4096, max_num_batched_tokens=2048, enable_prefix_caching=False)
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    pg = eng.runner.prefill_graphs
    assert pg is not None, "no prefill graphs (needs CUDA, triton, bf16/fp16)"
    reserved0 = torch.cuda.memory_reserved()
    first = run_step(eng, 1, 512)
    res = {"device": torch.cuda.get_device_name(), "model": path, "load_s": load_s,
           "first_512_step_ms": first * 1e3, "load_to_first_token_s": load_s + first}
    res["p512"] = compare(eng, 1, 512, 20)
    res["buckets"] = [compare(eng, 1, n, 5) for n in (64, 128, 256, 1024, 2048)]
    res["b16x128"] = compare(eng, 16, 128, 5)
    res["graphs"] = sorted(pg.graphs)
    res["capture_s_total"] = pg.capture_seconds
    res["graph_reserved_mib"] = (torch.cuda.memory_reserved() - reserved0) / 2**20
    print(json.dumps(res, indent=1))
    p = res["p512"]
    print(f"512-token prompt, one engine step: graphs {p['graphs']['tok_s_best']:.0f} tok/s "
          f"({p['graphs']['best_ms']:.2f} ms), eager {p['eager']['tok_s_best']:.0f} tok/s "
          f"({p['eager']['best_ms']:.2f} ms); first use {p['first_use_ms']:.1f} ms; "
          f"load {load_s:.2f} s, load->first token {res['load_to_first_token_s']:.2f} s")
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
