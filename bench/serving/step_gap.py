"""Where one stream's time between tokens goes when the engine runs in its own process (issue 19).

The serving benchmark's 1-stream rows put HTTP ÷ engine near 0.85 with ~0.1 ms more between tokens over
HTTP than in the engine alone. This splits that gap: the same greedy request (PROMPT tokens, GEN new
tokens) through (a) an LLMEngine in this process, stepped in a plain loop (serving_engine.run_engine's
way), and (b) an engine process (orcd.engine.core_client.ProcessEngine, the one `orcd serve` starts),
read by an asyncio loop here with no HTTP in between. (b) - (a) is what the process split costs a step;
serving.py's HTTP rows minus (b) is what the API process and HTTP add. Rounds alternate a, b.

usage: python bench/serving/step_gap.py --model F.gguf [--rounds 7] [--gen 256] [--out OUT.json]
       (prints the table last; CUDA or CPU)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from orcd.engine.core_client import ProcessEngine
from orcd.engine.core_process import EngineBuild
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model


def gaps_ms(stamps: list[float]) -> list[float]:
    """Milliseconds between successive tokens (the first token's prefill left out)."""
    return [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:], strict=False)]


def in_process(engine: LLMEngine, ids: list[int], gen: int, rid: str) -> list[float]:
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    engine.add_validated(EngineRequest(rid, list(ids), sp))
    stamps = []
    while engine.has_work():
        events = engine.step()
        now = time.perf_counter()
        stamps += [now for ev in events if ev.token_id is not None]
    return stamps


async def through_process(engine: ProcessEngine, ids: list[int], gen: int, rid: str) -> list[float]:
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    stamps = []
    async for ev in engine.generate(EngineRequest(rid, list(ids), sp)):
        if ev.token_id is not None:
            stamps.append(time.perf_counter())
    return stamps


def summary(name: str, rounds: list[list[float]]) -> dict:
    per = [statistics.median(gaps_ms(s)) for s in rounds]
    allg = sorted(g for s in rounds for g in gaps_ms(s))
    return {"path": name, "itl_p50_ms": statistics.median(allg), "itl_p90_ms": allg[int(0.9 * len(allg))],
            "itl_mean_ms": statistics.fmean(allg), "round_p50s_ms": [round(x, 4) for x in per],
            "decode_tok_s": 1e3 / statistics.fmean(allg)}


async def run(args) -> dict:
    loaded = load_model(args.model, device=args.device)
    vocab = loaded.cfg.vocab_size
    local = LLMEngine(loaded, num_kv_blocks=args.kv_blocks, max_num_seqs=64)
    proc = ProcessEngine.spawn(EngineBuild(Path(args.model), device=args.device,
                                           num_kv_blocks=args.kv_blocks, max_num_seqs=64))
    proc.start()
    a_rounds, b_rounds = [], []
    try:
        for k in range(args.rounds + 1):  # round 0: warm-up of both
            ids = [100 + (7919 * k + 31 * i) % (vocab - 200) for i in range(args.prompt)]
            a = in_process(local, ids, args.gen, f"a{k}")
            b = await through_process(proc, ids, args.gen, f"b{k}")
            if k:
                a_rounds.append(a)
                b_rounds.append(b)
    finally:
        await asyncio.to_thread(proc.shutdown, 0.0)
    rows = [summary("engine in this process", a_rounds), summary("engine process, no HTTP", b_rounds)]
    return {"model": args.model, "device": str(loaded.device), "prompt": args.prompt, "gen": args.gen,
            "rounds": args.rounds, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--kv-blocks", type=int, default=512)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = asyncio.run(run(args))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"| path ({res['device']}, 1 stream, {args.gen} tokens x {args.rounds}) | ITL p50 ms | p90 ms | "
          "mean ms | tok/s | per-round p50 ms |")
    print("|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(f"| {r['path']} | {r['itl_p50_ms']:.3f} | {r['itl_p90_ms']:.3f} | {r['itl_mean_ms']:.3f} | "
              f"{r['decode_tok_s']:,.0f} | {r['round_p50s_ms']} |")


if __name__ == "__main__":
    main()
