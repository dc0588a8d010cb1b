"""orcd's side of the peer comparison: decode and prefill through LLMEngine.step() on one GGUF file.

usage: python bench/peers/orcd_side.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--gen 128] [--prompt 128]
                                       [--dense-batch-rows auto,off,8] [--q6k-layout auto|gguf|split]

Decode (as bench_batching's engine phase): C greedy requests of `prompt` random ids, `gen` new tokens
each (EOS ignored), all added at once; tok/s = tokens that arrive after every request has its first token,
over the time from that moment to the last token (llama-batched-bench's S_TG: B * TG / T_TG, with the
prompts processed before its clock starts). Prefill: one fresh 512-token prompt, max_tokens = 1, one
engine step (prefill CUDA graph), median of 10 after a first use that captures it.
--dense-batch-rows: one engine per value, built fresh in this process one after the other ("auto": the
engine's default, sizing.auto_dense_rows; "off": the quantized kernels only; R: LLMEngine(
dense_batch_rows=R), decode batches of >= R rows on dense weight copies); with several values OUT.json
is {"runs": [measure(), ...]} and a table of tok/s and the weights' device bytes is printed last.
--q6k-layout: load_model's (orcd/loading/q6k_layout.py; default auto).
"""

from __future__ import annotations

import argparse
import gc
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
            engines: list | None = None, dense_batch_rows: int | str | None = "auto",
            q6k_layout: str = "auto") -> dict:
    """Decode rounds at each stream count, then prefill; `engines`: the engine built here is appended
    (a caller that profiles it afterwards, e.g. bench/kernels/gpt_oss_profile.py). dense_batch_rows:
    LLMEngine's ("auto", the default; None: off). q6k_layout: load_model's."""
    rng = random.Random(0)
    t0 = time.perf_counter()
    loaded = load_model(path, device=DEV, q6k_layout=q6k_layout)
    blocks = max(streams) * -(-(prompt + gen) // 16) + 2 * -(-prefill_len // 16) * 12 + 64
    eng = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max(64, max(streams)),
                    enable_prefix_caching=False, dense_batch_rows=dense_batch_rows)
    if engines is not None:
        engines.append(eng)
    res: dict = {"model": path, "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
                 "load_and_init_s": time.perf_counter() - t0, "decode": {}, "prompt": prompt, "gen": gen,
                 "dense_batch_rows": dense_batch_rows, "dense_rows": eng.dense.rows if eng.dense else None,
                 "q6k_layout": q6k_layout,
                 "weights_bytes": eng.stats()["weights_bytes"],
                 "dense_weights_bytes": eng.dense_weights_bytes,
                 "device_allocated_bytes": torch.cuda.memory_allocated() if DEV == "cuda" else None}
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


def dense_values(text: str) -> list[int | str | None]:
    """--dense-batch-rows "auto,off,8" -> ["auto", None, 8]."""
    return [None if v == "off" else v if v == "auto" else int(v) for v in text.split(",")]


def table(runs: list[dict]) -> str:
    """One line per run: dense rows, weights GiB on the device (of which dense copies), tok/s per stream
    count, prefill tok/s."""
    streams = list(runs[0]["decode"])
    lines = ["dense_rows  weights_GiB  dense_GiB  alloc_GiB " + "".join(f"{c:>9}" for c in streams)
             + "  prefill"]
    for r in runs:
        alloc = r["device_allocated_bytes"]
        rows = f"{r['dense_batch_rows'] or 'off'}"
        if r["dense_batch_rows"] == "auto":
            rows += f"={r['dense_rows'] or 'off'}"
        lines.append(f"{rows:>10}  {r['weights_bytes'] / 2**30:>11.2f}  "
                     f"{r['dense_weights_bytes'] / 2**30:>9.2f}  "
                     f"{alloc / 2**30 if alloc is not None else float('nan'):>9.2f} "
                     + "".join(f"{r['decode'][c]['decode_tok_s']:>9,.0f}" for c in streams)
                     + f"  {r['prefill']['tok_s']:>7,.0f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--dense-batch-rows", type=dense_values, default=["auto"], metavar="auto,off,R,...",
                    help="one engine per value: auto (the engine's default), off (quantized kernels only) or "
                         "R (LLMEngine's dense_batch_rows); default auto")
    ap.add_argument("--q6k-layout", default="auto", choices=("auto", "gguf", "split"))
    a = ap.parse_args()
    runs = []
    for rows in a.dense_batch_rows:
        runs.append(measure(a.model, [int(s) for s in a.streams.split(",")], a.prompt, a.gen,
                            dense_batch_rows=rows, q6k_layout=a.q6k_layout))
        gc.collect()  # the engine (graphs, copies, KV cache) goes before the next one is built
        if DEV == "cuda":
            torch.cuda.empty_cache()
        with open(a.out, "w") as f:
            json.dump(runs[0] if len(runs) == 1 else {"runs": runs}, f, indent=1)
    print(table(runs), flush=True)


if __name__ == "__main__":
    main()
