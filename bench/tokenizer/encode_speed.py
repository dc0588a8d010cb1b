"""Encode speed of orcd's GGUF tokenizer (MB of UTF-8 text per second), not a test.

    python bench/tokenizer/encode_speed.py [--mb 4] [--vocab gpt-2 --vocab llama-spm ...]

Vocabularies: llama.cpp's, fetched once by orcd.testdata (`python -m orcd.testdata`).
Text: a deterministic mix of English prose, code, numbers and non-Latin script, generated here.
Each vocabulary encodes the whole text once as one string (no special-token parsing), best of --repeat.
"""

from __future__ import annotations

import argparse
import random
import time

from orcd import testdata
from orcd.gguf import open_gguf
from orcd.tokenizer import load_tokenizer

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but "
         "have an they you were her she there been one all we their has would when if so no will more "
         "tokenizer inference model sequence attention cache kernel quantized").split()
EXTRA = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { s += a[i]; }\n", "3.14159 2718 1e-9",
         "Über naïve café", "東京と大阪の天気", "Привет, мир!", "🦙🚀", "  indented\n\n", "'s 'll 're"]


def make_text(n_bytes: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_bytes:
        if rng.random() < 0.1:
            piece = rng.choice(EXTRA)
        else:
            piece = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))).capitalize() + ". "
        parts.append(piece)
        size += len(piece.encode())
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--vocab", action="append", help="vocab name (default: gpt-2, llama-spm, deepseek-llm)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    text = make_text(int(args.mb * 1e6))
    mb = len(text.encode()) / 1e6
    data = testdata.fetch(verbose=True)
    for name in args.vocab or ["gpt-2", "llama-spm", "deepseek-llm"]:
        tok = load_tokenizer(open_gguf(data.vocab_path(name)).metadata)
        best, best_cpu = float("inf"), float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            ids = tok.encode(text)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        # CPU time (all threads) says what a loaded machine hides: MB per CPU-second
        print(f"{name:14s} {mb:.2f} MB -> {len(ids)} tokens in {best:.2f} s wall ({best_cpu:.2f} s CPU): "
              f"{mb / best:.2f} MB/s, {mb / best_cpu:.2f} MB per CPU-s")


if __name__ == "__main__":
    main()
