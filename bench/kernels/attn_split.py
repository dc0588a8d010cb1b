"""Sweep of the split decode-attention kernel's launch on the GPU: splits, context tokens per iteration
(block_n), warps, software-pipeline stages.

Shapes as the engine's decode graphs see them: the 0.5B (14 query / 2 KV heads, D 64) or the 7B (28 / 4,
D 128), bf16 caches of 16-token pages, a block table 2,048 columns wide (32k context; unused columns name
one scratch block), every sequence at the same context. Each time is one CUDA graph replaying L layer calls
(each layer its own cache; L makes the caches >= 400 MB, so L2 holds none of them), divided by L: µs per
layer, the merge launch included. Each configuration's output at the deepest context is checked against the
default launch's (max abs difference, bf16).

Usage: python bench/kernels/attn_split.py --model 0.5b|7b --batches 1,8,64 --contexts 160,4096 --out F.json
       python bench/kernels/attn_split.py --report F.json [F.json ...]   (no GPU: a markdown table of
       session 34's launch against default_launch's, per shape and context, from the sweeps' rows)
       python bench/kernels/attn_split.py --plot OUT.png F.json [F.json ...]   (the table and its bars)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_times import graph_time_ms  # noqa: E402

from orcd.models.layers.attention_triton import (  # noqa: E402
    SplitLaunch,
    default_launch,
    paged_decode_attention,
)

SHAPES = {"0.5b": (14, 2, 64), "7b": (28, 4, 128)}  # query heads, KV heads, head dim
PAGE, WIDTH = 16, 2048
TILES = [SplitLaunch(bn, w, st) for bn, w, st in itertools.product((32, 64, 128), (2, 4, 8), (1, 2, 3))]


def build(batch: int, heads: tuple[int, int, int], max_ctx: int):
    """-> (q [B, Hq, D], caches [(k, v)] per layer, tables [B, WIDTH] int32, layers)."""
    n_heads, n_kv, dim = heads
    pages = math.ceil(max_ctx / PAGE)
    n_blocks = batch * pages + 1  # block 0: the scratch block the unused columns name
    layer_bytes = 2 * batch * max_ctx * n_kv * dim * 2
    layers = max(2, min(256, math.ceil(400e6 / layer_bytes)))
    tables = torch.zeros((batch, WIDTH), dtype=torch.int32, device="cuda")
    tables[:, :pages] = (1 + torch.randperm(batch * pages, device="cuda")).view(batch, pages).to(torch.int32)
    caches = [(torch.randn(n_blocks, PAGE, n_kv, dim, device="cuda", dtype=torch.bfloat16),
               torch.randn(n_blocks, PAGE, n_kv, dim, device="cuda", dtype=torch.bfloat16))
              for _ in range(layers)]
    q = torch.randn(batch, n_heads, dim, device="cuda", dtype=torch.bfloat16)
    return q, caches, tables, layers


def time_one(q, caches, tables, seq_lens, splits: int, tile: SplitLaunch) -> float:
    """µs per layer of paged_decode_attention with these settings."""
    scale = q.shape[-1] ** -0.5

    def step():
        for k, v in caches:
            paged_decode_attention(q, k, v, tables, seq_lens, scale, num_splits=splits, launch=tile)

    return graph_time_ms(step, reps=10) * 1e3 / len(caches)


def parse_tiles(text: str) -> list[SplitLaunch]:
    """"64x4x2,32x2x3" -> block_n x warps x stages each; "all": TILES."""
    if text == "all":
        return TILES
    return [SplitLaunch(*(int(v) for v in t.split("x"))) for t in text.split(",")]


def sweep_batch(model: str, batch: int, contexts: list[int], tiles: list[SplitLaunch]) -> list[dict]:
    heads = SHAPES[model]
    q, caches, tables, layers = build(batch, heads, max(contexts))
    default = default_launch(batch, heads[1], heads[2], WIDTH * PAGE)[0]
    split_opts = sorted({s for s in (default // 2, default, default * 2, default * 4) if 1 <= s <= 64})
    deep = torch.full((batch,), max(contexts), dtype=torch.int32, device="cuda")
    k0, v0 = caches[0]
    ref = paged_decode_attention(q, k0, v0, tables, deep, q.shape[-1] ** -0.5)
    rows = []
    for splits, tile in itertools.product(split_opts, tiles):
        row = {"model": model, "batch": batch, "layers": layers, "splits": splits, "default_splits": default,
               "block_n": tile.block_n, "num_warps": tile.num_warps, "num_stages": tile.num_stages}
        try:
            out = paged_decode_attention(q, k0, v0, tables, deep, q.shape[-1] ** -0.5, num_splits=splits,
                                         launch=tile)
            row["max_abs_diff"] = (out.float() - ref.float()).abs().max().item()
            for ctx in contexts:
                sl = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
                row[f"us_{ctx}"] = time_one(q, caches, tables, sl, splits, tile)
        except Exception as e:  # a tile that does not fit (shared memory, registers): recorded, skipped
            row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
        rows.append(row)
    del caches
    torch.cuda.empty_cache()
    return rows


def summary(rows: list[dict], contexts: list[int]) -> list[str]:
    lines = []
    for batch in sorted({r["batch"] for r in rows}):
        ok = [r for r in rows if r["batch"] == batch and "error" not in r]
        at_default = [r for r in ok if r["splits"] == r["default_splits"]]
        base = next((r for r in at_default if (r["block_n"], r["num_warps"], r["num_stages"]) == (64, 4, 3)),
                    at_default[0])
        best_sum = min(ok, key=lambda r: sum(r[f"us_{c}"] for c in contexts))
        lines.append(f"B={batch} default {fmt(base, contexts)}")
        lines.append(f"B={batch} best sum {fmt(best_sum, contexts)}")
        for c in contexts:
            lines.append(f"B={batch} best at {c} {fmt(min(ok, key=lambda r: r[f'us_{c}']), contexts)}")
    return lines


def fmt(r: dict, contexts: list[int]) -> str:
    times = " ".join(f"{c}:{r[f'us_{c}']:.1f}us" for c in contexts)
    return (f"splits {r['splits']} bn {r['block_n']} w {r['num_warps']} st {r['num_stages']} | {times} "
            f"| diff {r['max_abs_diff']:.2e}")


def old_launch(batch: int, n_kv: int) -> tuple[int, int, int, int]:
    """Session 34's rule: 256 programs, at most 64 splits; block_n 64, 4 warps, 3 stages."""
    return min(64, triton.next_power_of_2(max(1, 256 // (batch * n_kv)))), 64, 4, 3


def compare(files: list[str]) -> list[tuple[str, float, float]]:
    """(shape and context, µs a layer under the old launch, under default_launch) from the sweeps' rows."""
    rows = [r for f in files for r in json.loads(Path(f).read_text())["rows"] if "error" not in r]
    key = {(r["model"], r["batch"], r["splits"], r["block_n"], r["num_warps"], r["num_stages"]): r
           for r in rows}
    contexts = sorted(int(k[3:]) for k in rows[0] if k.startswith("us_"))
    out = []
    for model, batch in sorted({(r["model"], r["batch"]) for r in rows}):
        _, n_kv, dim = SHAPES[model]
        splits, tile = default_launch(batch, n_kv, dim, WIDTH * PAGE)
        r_new = key[(model, batch, splits, tile.block_n, tile.num_warps, tile.num_stages or 3)]
        r_old = key[(model, batch, *old_launch(batch, n_kv))]
        out += [(f"{model} B={batch} ctx {c}", r_old[f"us_{c}"], r_new[f"us_{c}"]) for c in contexts]
    return out


def report(files: list[str], png: str | None) -> None:
    """A markdown table of compare(files); with png, bars of it (matplotlib)."""
    table = compare(files)
    print("| shape, context | 256 programs, 3 stages (µs a layer) | default_launch | ratio |")
    print("|---|---|---|---|")
    for label, old, new in table:
        print(f"| {label} | {old:.1f} | {new:.1f} | {new / old:.2f} |")
    if png is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, len(table) * 0.9), 4.5))
    xs = range(len(table))
    ax.bar([x - 0.2 for x in xs], [t[1] for t in table], 0.4, label="256 programs, 3 stages (session 34)")
    ax.bar([x + 0.2 for x in xs], [t[2] for t in table], 0.4, label="default_launch (session 35)")
    ax.set_xticks(list(xs), [t[0].replace(" ctx", "\nctx") for t in table], fontsize=7)
    ax.set_ylabel("µs a layer (split kernel + merge)")
    devices = sorted({json.loads(Path(f).read_text())["device"] for f in files})
    ax.set_title(f"paged decode attention, {', '.join(devices)}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--report":
        return report(sys.argv[2:], None)
    if len(sys.argv) > 3 and sys.argv[1] == "--plot":
        return report(sys.argv[3:], sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SHAPES), required=True)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--contexts", default="160,4096")
    ap.add_argument("--tiles", default="all", help="block_n x warps x stages, e.g. 64x4x2,64x4x3; all: 27")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        rows += sweep_batch(args.model, batch, contexts, parse_tiles(args.tiles))
        result = {"device": torch.cuda.get_device_name(), "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=1))
    print("\n".join(summary(rows, contexts)))


if __name__ == "__main__":
    main()
