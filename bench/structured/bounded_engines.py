"""llguidance against xgrammar on mask_cost.py's schemas (plain, bounded: maxLength strings), per-token mask
time on the qwen2 vocabulary (151,936 tokens, CPU, one row), and whether the two masks agree. Not a test.

Two walks per schema, both engines fed the same tokens:
- valid: the tokens of a JSON text both schemas accept (fill_scaling.answer: short names and tags);
- random: each step a random token of llguidance's mask (what the random-weight model in mask_cost.py
  writes: strings up to their maxLength), where llguidance walks the whole vocabulary per token.
Control tokens are given to xgrammar as empty strings (never text), as orcd marks them for llguidance.
xgrammar is not an orcd dependency: `pip install xgrammar` first.

    python bench/structured/bounded_engines.py [--tokens 200] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from fill_scaling import answer
from grammar_engines import load_vocab
from mask_cost import SCHEMAS

RESULT = "bounded_engines"


def engines(tok):
    """(llguidance backend, xgrammar TokenizerInfo) for one orcd tokenizer."""
    import xgrammar as xgr

    from orcd.structured.backend import GrammarBackend, eos_ids
    from orcd.tokenizer.vocab import CONTROL

    backend = GrammarBackend(tok)
    backend.lltok  # noqa: B018 - built before timing
    pieces = [b"" if tok.vocab.types[i] == CONTROL else tok.pieces[i] for i in range(tok.vocab_size)]
    info = xgr.TokenizerInfo(pieces, xgr.VocabType.RAW, vocab_size=tok.vocab_size,
                             stop_token_ids=eos_ids(tok))
    return backend, info


def walk(backend, info, schema: dict, tokens: list[int] | None, steps: int, seed: int) -> dict:
    """Mask both engines' next tokens `steps` times along `tokens` (None: a random token of llguidance's
    mask each step). Times in µs; `differ`: steps whose masks were not equal."""
    import xgrammar as xgr

    from orcd.structured.grammars import json_schema_grammar

    rng = random.Random(seed)
    m = backend.matcher(json_schema_grammar(schema, "schema"))
    t0 = time.perf_counter()
    compiled = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":"))
    compile_ms = 1e3 * (time.perf_counter() - t0)
    xm = xgr.GrammarMatcher(compiled)
    xmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    ll, xg, differ = [], [], 0
    for step in range(steps if tokens is None else min(steps, len(tokens))):
        t0 = time.perf_counter()
        lmask = backend.fill([m])
        t1 = time.perf_counter()
        xm.fill_next_token_bitmask(xmask, 0)
        t2 = time.perf_counter()
        ll.append(t1 - t0)
        xg.append(t2 - t1)
        differ += int(not torch.equal(lmask[0], xmask[0, : lmask.shape[1]]))
        if tokens is None:
            allowed = [t for t in lmask[0].nonzero().flatten().tolist()]  # words, then a bit of one
            w = rng.choice(allowed)
            bits = [b for b in range(32) if (int(lmask[0, w]) >> b) & 1]
            t = 32 * w + rng.choice(bits)
        else:
            t = tokens[step]
        m.consume(t)
        if not xm.accept_token(t):
            return _row(ll, xg, differ, compile_ms) | {"xgrammar_refused_at": step}
    return _row(ll, xg, differ, compile_ms)


def _row(ll: list[float], xg: list[float], differ: int, compile_ms: float) -> dict:
    def us(ts: list[float]) -> dict:
        return {"median": 1e6 * statistics.median(ts), "mean": 1e6 * statistics.fmean(ts),
                "max": 1e6 * max(ts)}
    return {"steps": len(ll), "llguidance_us": us(ll), "xgrammar_us": us(xg), "masks_differ": differ,
            "xgrammar_compile_ms": compile_ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    from importlib import metadata

    tok = load_vocab("qwen2")
    backend, info = engines(tok)
    text = tok.encode(answer(random.Random(0)))
    res = {"command": " ".join(["python", *sys.argv]), "xgrammar": metadata.version("xgrammar"), "rows": []}
    for schema in SCHEMAS:
        for name, tokens in (("valid", text), ("random", None)):
            r = {"schema": schema, "walk": name}
            r |= walk(backend, info, SCHEMAS[schema], tokens, args.tokens, 1)
            res["rows"].append(r)
            times = " ".join(f"{e} median {r[e + '_us']['median']:.1f} mean {r[e + '_us']['mean']:.1f} "
                             f"max {r[e + '_us']['max']:.0f} us;" for e in ("llguidance", "xgrammar"))
            print(f"{schema:8s} {name:6s} steps {r['steps']}: {times} masks differ {r['masks_differ']}; "
                  f"refused {r.get('xgrammar_refused_at', '-')}; xgrammar compile "
                  f"{r['xgrammar_compile_ms']:.0f} ms", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{RESULT}.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
