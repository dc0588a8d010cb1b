"""orcd's side of the peer comparison: decode and prefill through LLMEngine.step() on one GGUF file.

usage: python bench/peers/orcd_side.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--gen 128] [--prompt 128]

Decode (as bench_batching's engine phase): C greedy requests of `prompt` random ids, `gen` new tokens
each (EOS ignored), all added at once; tok/s = tokens that arrive after every request has its first token,
over the time from that moment to the last token (llama-batched-bench's S_TG: B * TG / T_TG, with the
prompts processed before its clock starts). Prefill: one fresh 512-token prompt, max_tokens = 1, one
engine step (prefill CUDA graph), median of 10 after a first use that captures it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model

_rid = [0]
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU only for a smoke test on a tiny file


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def decode_round(eng: LLMEngine, streams: int, prompt: int, gen: int, rng: random.Random) -> dict:
    """One round of `streams` concurrent requests; decode tok/s after the last first token."""
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    _sync()
    t0 = time.perf_counter()
    for _ in range(streams):
        _rid[0] += 1
        eng.add_request(EngineRequest(f"d{_rid[0]}", _ids(rng, prompt, eng.cfg.vocab_size), sp))
    first: dict[str, float] = {}
    stamps: list[tuple[float, int]] = []
    while eng.has_work():
        events = eng.step()  # ends with the sampled ids on the host: the device finished the step
        now = time.perf_counter()
        n = 0
        for ev in events:
            if ev.token_id is not None:
                n += 1
                first.setdefault(ev.request_id, now)
        stamps.append((now, n))
    all_first, t_end = max(first.values()), stamps[-1][0]
    tokens = sum(n for t, n in stamps if t > all_first)
    return {"streams": streams, "decode_tok_s": tokens / (t_end - all_first), "decode_tokens": tokens,
            "decode_s": t_end - all_first, "wall_s": t_end - t0, "steps": len(stamps)}


def prefill_step(eng: LLMEngine, n: int, rng: random.Random) -> float:
    """Seconds for one fresh n-token prompt's only step (max_tokens = 1), device synchronized."""
    _rid[0] += 1
    sp = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    eng.add_request(EngineRequest(f"p{_rid[0]}", _ids(rng, n, eng.cfg.vocab_size), sp))
    _sync()
    t0 = time.perf_counter()
    steps = 0
    while eng.has_work():
        eng.step()
        steps += 1
    _sync()
    if steps != 1:
        raise RuntimeError(f"a {n}-token prompt took {steps} steps")
    return time.perf_counter() - t0


def measure(path: str, streams: list[int], prompt: int, gen: int, prefill_len: int = 512,
            engines: list | None = None) -> dict:
    """Decode rounds at each stream count, then prefill; `engines`: the engine built here is appended
    (a caller that profiles it afterwards, e.g. bench/kernels/gpt_oss_profile.py)."""
    rng = random.Random(0)
    t0 = time.perf_counter()
    loaded = load_model(path, device=DEV)
    blocks = max(streams) * -(-(prompt + gen) // 16) + 2 * -(-prefill_len // 16) * 12 + 64
    eng = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max(64, max(streams)),
                    enable_prefix_caching=False)
    if engines is not None:
        engines.append(eng)
    res: dict = {"model": path, "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
                 "load_and_init_s": time.perf_counter() - t0, "decode": {}, "prompt": prompt, "gen": gen}
    for c in streams:  # warm-up: every batch shape once (Triton compiles)
        decode_round(eng, c, prompt, 8, rng)
    for c in streams:
        r = decode_round(eng, c, prompt, gen, rng)
        res["decode"][str(c)] = r
        print(f"orcd decode {c:>3} streams: {r['decode_tok_s']:,.0f} tok/s", flush=True)
    first = prefill_step(eng, prefill_len, rng)
    ts = [prefill_step(eng, prefill_len, rng) for _ in range(10)]
    med = statistics.median(ts)
    res["prefill"] = {"tokens": prefill_len, "first_use_ms": first * 1e3, "median_ms": med * 1e3,
                      "tok_s": prefill_len / med, "best_tok_s": prefill_len / min(ts)}
    print(f"orcd prefill {prefill_len}: {res['prefill']['tok_s']:,.0f} tok/s", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    a = ap.parse_args()
    res = measure(a.model, [int(s) for s in a.streams.split(",")], a.prompt, a.gen)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
