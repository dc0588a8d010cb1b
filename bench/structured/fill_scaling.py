"""The CPU side of the structured-output mask alone: the bitmask of k rows, each row walking its own valid
JSON text (the tokens a model that knows JSON would write). No model runs; the vocabulary is the model
file's. Not a test.

    python bench/structured/fill_scaling.py --model F.gguf [--rows 1,8,64] [--threads=-1,0,16] [--tokens 96]

threads -1: GrammarBackend.fill (one matcher after another on the caller's thread); 0 and up: the same
rows through llguidance's parallel executor (LLExecutor(threads); 0: its default, 80 % of the CPUs).
Prints ms per fill (all rows) per schema and writes OUT/fill_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

from mask_cost import SCHEMAS

WORDS = ("ada bob carol dave eve frank grace heidi ivan judy mallory oscar peggy trent victor walter alpha "
         "beta data model river stone light cloud").split()


def answer(rng: random.Random) -> str:
    """A JSON text both schemas accept (strings within their bounds)."""
    def person() -> dict:
        return {"name": " ".join(rng.choice(WORDS).title() for _ in range(2)), "age": rng.randrange(90),
                "email": f"{rng.choice(WORDS)}.{rng.choice(WORDS)}@{rng.choice(WORDS)}.org",
                "role": rng.choice(["admin", "user", "guest"]),
                "tags": [rng.choice(WORDS) for _ in range(rng.randrange(4))]}
    return json.dumps({"people": [person() for _ in range(40)]}, separators=(",", ":"))


def executor_fill(backend, executor, matchers: list) -> None:
    """The rows' masks through llguidance's parallel executor (what fill did before 2026-11-26)."""
    import torch

    words = (backend.vocab_size + 31) // 32
    bitmask = torch.zeros((len(matchers), words), dtype=torch.int32)
    rows = [(m.m, i) for i, m in enumerate(matchers)]  # .m applies the pending tokens
    executor.unsafe_compute_mask_ptr(rows, bitmask.data_ptr(), words * 4, len(matchers))


def walk(backend, grammar: str, rows: int, tokens: int, seed: int, executor) -> list[float]:
    """Seconds of each fill while `rows` matchers walk `tokens` tokens of their own texts."""
    rng = random.Random(seed)
    texts = [backend.tokenizer.encode(answer(rng))[:tokens] for _ in range(rows)]
    matchers = [backend.matcher(grammar) for _ in range(rows)]
    times = []
    for step in range(tokens):
        t0 = time.perf_counter()
        backend.fill(matchers) if executor is None else executor_fill(backend, executor, matchers)
        times.append(time.perf_counter() - t0)
        for m, text in zip(matchers, texts, strict=True):
            m.consume(text[step])
    assert not any(m.m.is_error() for m in matchers)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rows", default="1,8,64")
    ap.add_argument("--threads", default="-1,0,16")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    import llguidance

    from orcd.gguf import open_gguf
    from orcd.structured.backend import GrammarBackend
    from orcd.structured.grammars import json_schema_grammar
    from orcd.tokenizer import load_tokenizer

    backend = GrammarBackend(load_tokenizer(open_gguf(args.model).metadata))
    backend.lltok  # noqa: B018 - built before timing
    res = {"cpus": os.cpu_count(), "model": args.model, "tokens": args.tokens,
           "command": " ".join(["python", *sys.argv]), "rows": []}
    modes = [int(t) for t in args.threads.split(",")]
    for schema, threads in [(s, t) for s in SCHEMAS for t in modes]:
        executor = llguidance.LLExecutor(threads or None) if threads >= 0 else None
        grammar = json_schema_grammar(SCHEMAS[schema], "schema")
        for rows in map(int, args.rows.split(",")):
            times = walk(backend, grammar, rows, args.tokens, rows, executor)[8:]  # past the first fills
            r = {"schema": schema, "threads": threads, "rows": rows, "mean_ms": 1e3 * statistics.fmean(times),
                 "median_ms": 1e3 * statistics.median(times), "max_ms": 1e3 * max(times)}
            res["rows"].append(r)
            print(f"{schema:8s} threads {threads or 'default':>7} rows {rows:3d}: fill "
                  f"mean {r['mean_ms']:.3f} median {r['median_ms']:.3f} max {r['max_ms']:.1f} ms", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "fill_scaling.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
