"""Is the 7B engine's greedy output repeatable, and equal between the Q6_K layouts (issue 16)?

q6k_split_engine.py found gguf and split greedy tokens equal for 8 prompts together (256/256) but not for
one prompt alone (10/32), though every product it checks is bit-equal between the layouts. This runs, per
layout, one prompt alone three times and the 8 prompts together twice in one engine, and reports each
layout's agreement with itself and with the other: a path that is not repeatable shows up as self-
disagreement. --no-pdl: launches without programmatic dependent launch (fused_linear.pdl_enabled off).

usage: python bench/kernels/greedy_repeat.py --model 7b.gguf [--no-pdl] [--gen 32]   (CUDA; table last)
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from q6k_split_engine import greedy  # noqa: E402

from orcd.engine.llm_engine import LLMEngine  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.quant.kernels import fused_linear  # noqa: E402


def agree(a: list[list[int]], b: list[list[int]]) -> str:
    """Position-wise equal tokens / all, and the first position where any prompt differs."""
    same = sum(x == y for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))
    firsts = [next((i for i, (x, y) in enumerate(zip(p, q, strict=True)) if x != y), None)
              for p, q in zip(a, b, strict=True)]
    first = min((f for f in firsts if f is not None), default=None)
    return f"{same}/{sum(len(p) for p in a)} (first difference at {first})"


def runs(path: str, layout: str, gen: int) -> dict:
    loaded = load_model(path, device="cuda", q6k_layout=layout)
    eng = LLMEngine(loaded, num_kv_blocks=512, max_num_seqs=64, enable_prefix_caching=False)
    prompts = [[random.Random(i).randrange(100, 150000) for _ in range(64)] for i in range(8)]
    out = {"one": [greedy(eng, prompts[:1], gen) for _ in range(3)],
           "eight": [greedy(eng, prompts, gen) for _ in range(2)]}
    del eng, loaded
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--no-pdl", action="store_true")
    a = ap.parse_args()
    if a.no_pdl:
        fused_linear.pdl_enabled = lambda device: False  # launch_opts reads it at each launch
    res = {layout: runs(a.model, layout, a.gen) for layout in ("gguf", "split")}
    print(f"| {'no PDL' if a.no_pdl else 'PDL'} | comparison | agreement |")
    print("|---|---|---|")
    for layout, r in res.items():
        print(f"| {layout} | one prompt, run 1 vs 2 / 1 vs 3 | {agree(r['one'][0], r['one'][1])} / "
              f"{agree(r['one'][0], r['one'][2])} |")
        print(f"| {layout} | 8 prompts, run 1 vs 2 | {agree(r['eight'][0], r['eight'][1])} |")
    g, s = res["gguf"], res["split"]
    print(f"| gguf vs split | one prompt, run 1 | {agree(g['one'][0], s['one'][0])} |")
    print(f"| gguf vs split | 8 prompts, run 1 | {agree(g['eight'][0], s['eight'][0])} |")
    print(f"| one prompt alone vs in the 8 | gguf / split | {agree(g['one'][0], g['eight'][0][:1])} / "
          f"{agree(s['one'][0], s['eight'][0][:1])} |")


if __name__ == "__main__":
    main()
