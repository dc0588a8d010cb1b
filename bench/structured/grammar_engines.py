"""llguidance vs xgrammar on orcd's own vocabularies (CPU): tokenizer build, JSON-schema compile, per-token
mask time, memory, install weight; plus orcd's whole mask step (64 constrained rows: matchers' bitmask +
applying it to the logits). Not a test.

    python bench/structured/grammar_engines.py [--engines llguidance xgrammar] [--vocabs qwen2 demo]
        [--rows 64] [--out bench/results]

Vocabularies: llama.cpp's ggml-vocab-qwen2.gguf (151,936 tokens, orcd.testdata) and the demo model's
(orcd/assets/demo.gguf, 3,003 tokens). Both engines get the same input: every token's bytes from orcd's
tokenizer and the EOS ids, no HF files. Each (engine, vocab) runs in its own subprocess, so its memory is
its own; xgrammar is optional (pip install xgrammar; `--no-deps` beside torch works).
The per-token time walks the tokens of one valid answer: mask, then accept, per token.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "pattern": "^[a-z0-9.]+@[a-z0-9]+\\.[a-z]{2,4}$"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["street", "city", "zip"],
                "additionalProperties": False},
    "role": {"enum": ["admin", "user", "guest"]}},
    "required": ["name", "age", "email", "tags", "address", "role"], "additionalProperties": False}
ANSWER = {"name": "Ada Lovelace", "age": 36, "email": "ada@analytical.org", "tags": ["math", "poetry"],
          "address": {"street": "12 St James's Square", "city": "London", "zip": "12345"}, "role": "admin"}
RESULT = "grammar_engines"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def peak_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def load_vocab(name: str):
    from orcd import testdata
    from orcd.gguf import open_gguf
    from orcd.hub import DEMO_MODEL_PATH
    from orcd.tokenizer import load_tokenizer

    path = DEMO_MODEL_PATH if name == "demo" else testdata.fetch().vocab_path(name)
    return load_tokenizer(open_gguf(path).metadata)


def _llguidance(tok, text: str) -> dict:
    from orcd.structured.backend import GrammarBackend
    from orcd.structured.grammars import json_schema_grammar

    t0 = time.perf_counter()
    backend = GrammarBackend(tok)
    backend.lltok  # noqa: B018 - builds the llguidance tokenizer
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = json_schema_grammar(SCHEMA, "schema")
    m = backend.matcher(grammar)
    t_compile = time.perf_counter() - t0
    times = []
    for t in tok.encode(text):
        t0 = time.perf_counter()
        backend.fill([m])
        times.append(time.perf_counter() - t0)
        m.consume(t)
    assert not m.m.is_error(), m.m.get_error()
    return {"tokenizer_s": t_tok, "compile_ms": t_compile * 1e3, "mask_us": _us(times), "tokens": len(times)}


def _xgrammar(tok, text: str) -> dict:
    import xgrammar as xgr

    from orcd.structured.backend import eos_ids

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo([tok.pieces[i] for i in range(tok.vocab_size)], xgr.VocabType.RAW,
                             vocab_size=tok.vocab_size, stop_token_ids=eos_ids(tok))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":"))
    m = xgr.GrammarMatcher(compiled)
    t_compile = time.perf_counter() - t0
    bitmask = xgr.allocate_token_bitmask(1, tok.vocab_size)
    times = []
    for t in tok.encode(text):
        t0 = time.perf_counter()
        m.fill_next_token_bitmask(bitmask, 0)
        times.append(time.perf_counter() - t0)
        assert m.accept_token(t), t
    return {"tokenizer_s": t_tok, "compile_ms": t_compile * 1e3, "mask_us": _us(times), "tokens": len(times)}


def _us(times: list[float]) -> dict:
    return {"median": statistics.median(times) * 1e6, "mean": statistics.fmean(times) * 1e6,
            "max": max(times) * 1e6}


def mask_step(tok, rows: int, repeat: int = 20) -> dict:
    """orcd's step cost at `rows` constrained rows (CPU): the matchers' bitmask, then the mask applied to
    fp32 logits [rows, vocab]; best of `repeat` (the matchers do not advance)."""
    import torch

    from orcd.engine.sampling_params import SamplingParams
    from orcd.runner.sampler import SampleRow, sample
    from orcd.structured.backend import GrammarBackend
    from orcd.structured.grammars import json_schema_grammar
    from orcd.structured.mask import apply_mask

    backend = GrammarBackend(tok)
    grammar = json_schema_grammar(SCHEMA, "schema")
    prefix = tok.encode(json.dumps(ANSWER, separators=(",", ":"))[:9])  # inside the "name" string
    matchers = [backend.matcher(grammar) for _ in range(rows)]
    for m in matchers:
        for t in prefix:
            m.consume(t)
    logits = torch.randn(rows, tok.vocab_size)
    fill, apply, free, constrained = [], [], [], []
    params = SamplingParams(temperature=1.0, seed=1)
    free_rows = [SampleRow(params) for _ in range(rows)]
    grammar_rows = [SampleRow(params, matcher=m) for m in matchers]
    for _ in range(repeat):
        t0 = time.perf_counter()
        bitmask = backend.fill(matchers)
        t1 = time.perf_counter()
        apply_mask(logits, list(range(rows)), bitmask)
        t2 = time.perf_counter()
        sample(logits, free_rows)
        t3 = time.perf_counter()
        sample(logits, grammar_rows)
        t4 = time.perf_counter()
        fill.append(t1 - t0)
        apply.append(t2 - t1)
        free.append(t3 - t2)
        constrained.append(t4 - t3)
    return {"rows": rows, "fill_ms": min(fill) * 1e3, "apply_ms": min(apply) * 1e3,
            "sample_free_ms": min(free) * 1e3, "sample_constrained_ms": min(constrained) * 1e3,
            "torch_threads": torch.get_num_threads()}


def child(engine: str, vocab: str, rows: int) -> dict:
    import torch  # both engines use it (orcd does anyway): its load and first ops are not counted

    torch.zeros(4, dtype=torch.int32).sum()
    base = rss_mb()
    if engine == "xgrammar":
        import xgrammar  # noqa: F401
    else:
        import llguidance  # noqa: F401
    imported = rss_mb()
    tok = load_vocab(vocab)
    with_tok = rss_mb()
    out = (_xgrammar if engine == "xgrammar" else _llguidance)(tok, json.dumps(ANSWER, separators=(",", ":")))
    out |= {"engine": engine, "vocab": vocab, "vocab_size": tok.vocab_size,
            "import_rss_mb": imported - base, "engine_rss_mb": rss_mb() - with_tok, "peak_rss_mb": peak_mb()}
    if engine == "llguidance":
        out["mask_step"] = mask_step(tok, rows)
    return out


def install_weight(dist: str) -> dict:
    """Installed size of the distribution's own files and its declared runtime dependencies."""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return {"dist": dist, "installed": False}
    paths = [Path(d.locate_file(f)) for f in d.files or []]
    size = sum(p.stat().st_size for p in paths if p.exists())
    deps = [r.split(";")[0].strip() for r in d.requires or [] if "extra ==" not in r]
    return {"dist": dist, "version": d.version, "installed_mb": size / 2**20, "requires": deps}


def write_md(results: list[dict], weights: list[dict], out: Path) -> None:
    lines = ["# Grammar engines on orcd's vocabularies (CPU)", "",
             f"`python bench/structured/grammar_engines.py` on {os.cpu_count()} CPU cores (1-minute load "
             f"average {os.getloadavg()[0]:.1f} at the end: shared machine), JSON schema of "
             f"{len(SCHEMA['properties'])} fields (nested object, patterns, enum, array); per-token mask "
             "time walks one valid answer. engine MB: RSS growth over the tokenizer build + compile + walk "
             "(torch's lazy first-op loads included); peak MB: the whole process (same work besides).", "",
             "| engine | vocab | tokenizer build s | schema compile ms | mask µs median | mask µs max | "
             "import MB | engine MB | peak MB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['engine']} | {r['vocab']} | {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['engine']} | {r['vocab']} ({r['vocab_size']}) | {r['tokenizer_s']:.3f} | "
                     f"{r['compile_ms']:.2f} | {r['mask_us']['median']:.1f} | {r['mask_us']['max']:.0f} | "
                     f"{r['import_rss_mb']:.0f} | {r['engine_rss_mb']:.0f} | {r['peak_rss_mb']:.0f} |")
    lines += ["", "| package | version | installed MB | runtime requires |", "|---|---|---|---|"]
    lines += [f"| {w['dist']} | {w.get('version', '-')} | {w.get('installed_mb', 0):.1f} | "
              f"{', '.join(w.get('requires', [])) or '(none)'} |" for w in weights]
    steps = [r for r in results if "mask_step" in r]
    if steps:
        lines += ["", "orcd's mask step (llguidance, all rows constrained, CPU fp32 logits, best of 20) and "
                  "the sampler's whole step (seeded, temperature 1) without and with the grammars:", "",
                  "| vocab | rows | bitmask fill ms | apply to logits ms | sample() free ms | "
                  "sample() constrained ms |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['vocab']} | {s['rows']} | {s['fill_ms']:.2f} | {s['apply_ms']:.2f} | "
                  f"{s['sample_free_ms']:.1f} | {s['sample_constrained_ms']:.1f} |"
                  for r in steps for s in [r["mask_step"]]]
    (out / f"{RESULT}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=["llguidance", "xgrammar"])
    ap.add_argument("--vocabs", nargs="+", default=["qwen2", "demo"])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "VOCAB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.rows)))
        return
    results = []
    for engine in args.engines:
        for vocab in args.vocabs:
            cmd = [sys.executable, __file__, "--child", engine, vocab, "--rows", str(args.rows)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode:
                why = res.stderr.strip().splitlines()[-1]
                results.append({"engine": engine, "vocab": vocab, "error": why})
            else:
                results.append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    weights = [install_weight(d) for d in ("llguidance", "xgrammar", "apache-tvm-ffi")]
    args.out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]  # a busy machine inflates every time here: recorded beside them
    (args.out / f"{RESULT}.json").write_text(json.dumps({"results": results, "install": weights,
                                                         "cpu_count": os.cpu_count(), "loadavg_1min": load},
                                                        indent=1))
    write_md(results, weights, args.out)
    print((args.out / f"{RESULT}.md").read_text())


if __name__ == "__main__":
    main()
