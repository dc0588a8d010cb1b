"""One row's mask fill (GrammarBackend.fill, CPU) inside strings with maxLength, for llguidance's default
tokenizer slices against orcd's (orcd.structured.backend.MASK_SLICES), and whether every mask is equal.
No model runs; the vocabulary is llama.cpp's qwen2 (151,936 tokens, orcd.testdata) or a model file's. Not a
test (tests/structured/test_mask_slices.py is).

Walks, each on fresh matchers of mask_cost.py's schemas (plain, bounded), the same tokens for every set:
- sweep (bounded): `{"people":[{"name":"` then 40 x `A`: one fill at each budget left, 40..0 characters;
- random: each step a random token of the default set's mask (what the random-weight model of
  mask_cost.py writes: strings up to their maxLength), --matchers matchers of --tokens tokens;
- valid: the tokens of fill_scaling.answer texts (short names and tags), same counts;
- batch: --batch rows at once, each on its own valid text (fill_scaling.walk), ms per fill of all rows.
Times are ms per row fill (each fill's median over --reps walks, the sets taking turns; then mean, median,
p90, max and sum over the walk's fills); `equal`: fills whose bitmask equals the default set's.

    python bench/structured/mask_fill_bounded.py [--vocab qwen2 | --model F.gguf] [--matchers 8]
        [--tokens 64] [--reps 3] [--also 20,7,5,3,2,1 ...] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from fill_scaling import answer
from fill_scaling import walk as batch_walk
from mask_cost import SCHEMAS

RESULT = "mask_fill_bounded_cpu"


def walks(backend, tokens: int, matchers: int) -> dict[tuple[str, str], tuple[list[list[int]], int]]:
    """{(schema, walk): (token lists, fills to skip at the start of each)}; the random walks are drawn
    from `backend`'s masks."""
    from orcd.structured.grammars import json_schema_grammar

    tok = backend.tokenizer
    a, head = tok.encode("A"), tok.encode('{"people":[{"name":"')
    assert len(a) == 1
    out = {("bounded", "sweep"): ([head + a * 40], len(head))}  # fills inside the name string only
    for schema in SCHEMAS:
        rng = random.Random(1)
        out[schema, "valid"] = ([tok.encode(answer(rng))[:tokens] for _ in range(matchers)], 0)
        grammar = json_schema_grammar(SCHEMAS[schema], "schema")
        seqs = []
        for _ in range(matchers):
            m, seq = backend.matcher(grammar), []
            for _ in range(tokens):
                seq.append(_pick(backend.fill([m])[0].numpy().view("uint8"), rng))
                m.consume(seq[-1])
            seqs.append(seq)
        out[schema, "random"] = (seqs, 0)
    return out


def _pick(allowed, rng: random.Random) -> int:
    """A random token whose bit is set in `allowed` (one bitmask row as uint8, little-endian bits)."""
    import numpy as np

    ids = np.nonzero(np.unpackbits(allowed, bitorder="little"))[0]
    return int(ids[rng.randrange(len(ids))])


def time_walk(backend, grammar: str, seqs: list[list[int]], skip_head: int) -> tuple[list[float], list]:
    """ms of each fill (after the first `skip_head` tokens of each sequence) and the bitmasks."""
    times, masks = [], []
    for seq in seqs:
        m = backend.matcher(grammar)
        for i, t in enumerate(seq + [None]):
            if i >= skip_head:
                t0 = time.perf_counter()
                bitmask = backend.fill([m])
                times.append(1e3 * (time.perf_counter() - t0))
                masks.append(bitmask)
            if t is not None:
                m.consume(t)
    return times, masks


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def stats(ms: list[float]) -> dict:
    q = sorted(ms)
    return {"fills": len(ms), "mean": statistics.fmean(ms), "median": statistics.median(ms),
            "p90": q[int(0.9 * (len(q) - 1))], "max": q[-1], "sum": sum(ms)}


def run(args) -> dict:
    from importlib import metadata

    from orcd import testdata
    from orcd.gguf import open_gguf
    from orcd.structured.backend import MASK_SLICES, GrammarBackend, content_slices
    from orcd.structured.grammars import json_schema_grammar
    from orcd.tokenizer import load_tokenizer

    path = args.model or str(testdata.fetch().vocab_path(args.vocab))
    tok = load_tokenizer(open_gguf(path).metadata)
    sets = {"default": None, "orcd": MASK_SLICES}
    for lengths in args.also:
        sets[f"1..{{{lengths}}}"] = content_slices(int(k) for k in lengths.split(","))
    backends, build_s, rss_mb = {}, {}, {}
    for name, slices in sets.items():
        t0, r0 = time.perf_counter(), _rss_mb()
        backends[name] = GrammarBackend(tok, slices=slices)
        backends[name].lltok  # noqa: B018 - built before timing
        build_s[name], rss_mb[name] = time.perf_counter() - t0, _rss_mb() - r0
    seqs = walks(backends["default"], args.tokens, args.matchers)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    res = {"command": " ".join(["python", *sys.argv]), "nproc": os.cpu_count(), "cpu": _cpu(),
           "loadavg": os.getloadavg(), "commit": commit.strip(), "vocab": path, "vocab_size": tok.vocab_size,
           "llguidance": metadata.version("llguidance"), "slices": sets, "tokenizer_build_s": build_s,
           "tokenizer_rss_mb": rss_mb,
           "rows": []}
    for (schema, walk), (lists, skip) in sorted(seqs.items()):
        grammar = json_schema_grammar(SCHEMAS[schema], "schema")
        times: dict[str, list[list[float]]] = {name: [] for name in backends}
        masks = {}
        for _ in range(args.reps):  # the sets in turn, so that the box's load falls on each alike
            for name, backend in backends.items():
                t, masks[name] = time_walk(backend, grammar, lists, skip)
                times[name].append(t)
        for name in backends:
            per_fill = [statistics.median(ts) for ts in zip(*times[name], strict=True)]
            equal = sum(torch.equal(a, b) for a, b in zip(masks[name], masks["default"], strict=True))
            row = {"schema": schema, "walk": walk, "slices": name, "equal": equal} | stats(per_fill)
            if walk == "sweep":  # fill i: 40 - i characters of the name's budget left
                by_left = dict(zip(range(40, -1, -1), per_fill, strict=True))
                res.setdefault("sweep_ms_by_left", {})[name] = by_left
            res["rows"].append(row)
            print(f"{schema:8s} {walk:6s} {name:7s}: {row['fills']} fills, ms mean {row['mean']:.3f} median "
                  f"{row['median']:.3f} p90 {row['p90']:.3f} max {row['max']:.2f} sum {row['sum']:.1f}; "
                  f"equal {equal}/{row['fills']}", flush=True)
    res["batch"] = batch_fills(backends, args)
    return res


def batch_fills(backends: dict, args) -> list[dict]:
    """ms per GrammarBackend.fill of --batch rows (one after another on this thread), each row walking its
    own valid text (fill_scaling.walk; its first 8 fills left out), the sets in turn --reps times."""
    from orcd.structured.grammars import json_schema_grammar

    rows = []
    for schema in SCHEMAS:
        grammar = json_schema_grammar(SCHEMAS[schema], "schema")
        times: dict[str, list[float]] = {name: [] for name in backends}
        for _ in range(args.reps):
            for name, backend in backends.items():
                ts = batch_walk(backend, grammar, args.batch, args.tokens, 7, None)[8:]
                times[name] += [1e3 * t for t in ts]
        for name, ts in times.items():
            rows.append({"schema": schema, "slices": name, "rows": args.batch} | stats(ts))
            print(f"{schema:8s} {args.batch} rows {name:7s}: ms per fill mean {rows[-1]['mean']:.2f} median "
                  f"{rows[-1]['median']:.2f} max {rows[-1]['max']:.1f}", flush=True)
    return rows


def markdown(res: dict) -> str:
    head = (f"# One row's mask fill inside maxLength strings (CPU): llguidance's default slices vs orcd's\n\n"
            f"`{res['command']}` at {res['commit']}, llguidance "
            f"{res['llguidance']}, {res['nproc']} CPUs ({res['cpu']}, shared: load average "
            f"{res['loadavg'][0]:.2f} at the start), vocabulary {res['vocab_size']:,} tokens. "
            "Tokenizer build: "
            + ", ".join(f"{k} {v:.2f} s (RSS +{res['tokenizer_rss_mb'][k]:.0f} MB)"
                        for k, v in res["tokenizer_build_s"].items())
            + ". ms per fill of one row (GrammarBackend.fill); equal: fills whose bitmask equals the default "
            "set's.\n\n| schema | walk | slices | fills | mean | median | p90 | max | sum | equal |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lefts = (40, 30, 25, 20, 15, 10, 9, 8, 6, 4, 2, 1, 0)
    sweep = res["sweep_ms_by_left"]
    tail = ("\nThe sweep's fills by characters left in the name's budget (maxLength 40), ms:\n\n| slices | "
            + " | ".join(map(str, lefts)) + " |\n|---|" + "---|" * len(lefts) + "\n"
            + "".join(f"| {k} | " + " | ".join(f"{v[n]:.2f}" for n in lefts) + " |\n"
                      for k, v in sweep.items()))
    tail += _batch_markdown(res["batch"])
    return head + "".join(
        f"| {r['schema']} | {r['walk']} | {r['slices']} | {r['fills']} | {r['mean']:.3f} | "
        f"{r['median']:.3f} | {r['p90']:.3f} | {r['max']:.2f} | {r['sum']:.1f} | "
        f"{r['equal']} of {r['fills']} |\n"
        for r in res["rows"]) + tail


def _batch_markdown(rows: list[dict]) -> str:
    return (f"\nThe batch's fill (GrammarBackend.fill of {rows[0]['rows']} rows, each walking its own valid "
            "text, one row after another on one thread), ms per fill over every step of --reps walks:\n\n"
            "| schema | slices | mean | median | p90 | max |\n|---|---|---|---|---|---|\n"
            + "".join(f"| {r['schema']} | {r['slices']} | {r['mean']:.2f} | {r['median']:.2f} | "
                      f"{r['p90']:.2f} | {r['max']:.1f} |\n" for r in rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", default="qwen2", help="a llama.cpp vocabulary of orcd.testdata")
    ap.add_argument("--model", help="a GGUF file whose vocabulary to use instead")
    ap.add_argument("--matchers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64, help="rows of the batch fills")
    ap.add_argument("--reps", type=int, default=3, help="times per fill: the median of this many walks")
    ap.add_argument("--also", nargs="*", default=[], help="more sets: content_slices of K,K,.. characters")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{RESULT}.json").write_text(json.dumps(res, indent=1))
    (out / f"{RESULT}.md").write_text(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
