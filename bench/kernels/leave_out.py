"""What each launch kind costs inside the batch-1 decode graph: the graph captured with one kind left out.

usage: python bench/kernels/leave_out.py MODEL.gguf OUT.json [--steps 256] [--rounds 3] [--only a,b]

A kernel timed alone is not the kernel in the step: there each one starts under the one before it
(programmatic dependent launch) and shares the memory system with its neighbours (session 17: a down GEMV
6 µs faster alone gave nothing in the graph). So this captures the norm-fused step (FusedDecoder, as the
engine replays it at one stream) once whole and once per variant with one kind of launch replaced by its
cached output (no kernel): the step's time saved is what that kind costs in place, gaps and overlap
included. Results are wrong in the variants (the outputs are stale); only the time is read.

Variants (the launches removed per token, for a 28-layer qwen2 7B; counted from the stand-ins' calls):
  quant  the x quantizations (quantize_x: before q/k/v, gate/up and the head, 57; o's too before 5a7154f, 85)
  rope   RoPE + K/V write (28)     attn   the paged attention, split + merge (56)
  qkv    the q/k/v GEMV (28)       o      the o GEMV (28)
  glu    the SwiGLU GEMV (28)      down   the down GEMV (28)      head   the LM head GEMV (1)
  down_q4k, down_q6k   the down GEMVs of one type only (a Q4_K_M 7B: 14 of each)
Each round replays every variant in turn (`steps` replays, after 3 warm-ups); the table gives the median
over rounds of ms per token, the saving against the whole step, and the saving per removed launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager

VARIANTS = ("quant", "rope", "attn", "qkv", "o", "glu", "down", "down_q4k", "down_q6k", "head")
DOWN_TYPES = {"down_q4k": 12, "down_q6k": 14}  # variant -> the GGML type of the downs it leaves out


CALLS: dict[str, int] = {}  # variant -> stand-in calls while its graph was built (warm-up + capture)


def cached(fn, key_of, variant: str):
    """fn -> a stand-in that runs fn once per key (the capture's eager warm-up) and returns that output
    after, launching nothing; counts its calls in CALLS[variant]."""
    store = {}

    def stand_in(*args, **kw):
        CALLS[variant] = CALLS.get(variant, 0) + 1
        key = key_of(*args, **kw)
        if key not in store:
            store[key] = fn(*args, **kw)
        return store[key]

    return stand_in


def counted_noop(variant: str):
    def stand_in(*args, **kw):
        CALLS[variant] = CALLS.get(variant, 0) + 1

    return stand_in


def downs_of_type_left_out(down, qtype: int, variant: str):
    """DecodeProducts.down with the layers whose down weight is of GGML type qtype launching nothing."""

    def stand_in(lin, act, res, partial=False):
        if int(lin.down.qtype) != qtype:
            return down(lin, act, res, partial)
        CALLS[variant] = CALLS.get(variant, 0) + 1
        return res

    return stand_in


def _shape_key(x, *args, **kw):
    return tuple(x.shape), kw.get("norm") is None


@contextmanager
def left_out(fd, variant: str):
    """Inside: FusedDecoder fd's step with `variant`'s launches replaced by cached outputs."""
    from orcd.runner import decode_products as dp

    saved_mod = {name: getattr(dp, name) for name in ("quantize_x", "rope_and_write_kv",
                                                      "paged_decode_attention")}
    products = fd.products
    saved_obj = {name: getattr(products, name) for name in ("qkv", "o", "glu", "down", "head")}
    if variant == "quant":
        dp.quantize_x = cached(saved_mod["quantize_x"], _shape_key, variant)
    elif variant == "rope":
        dp.rope_and_write_kv = counted_noop(variant)
    elif variant == "attn":
        dp.paged_decode_attention = cached(saved_mod["paged_decode_attention"], lambda q, *a, **k: q.shape,
                                           variant)
    elif variant in ("o", "down"):
        setattr(products, variant, counted_noop(variant))
    elif variant in DOWN_TYPES:
        products.down = downs_of_type_left_out(saved_obj["down"], DOWN_TYPES[variant], variant)
    elif variant in ("qkv", "glu", "head"):
        by_rows = lambda lin, res, nrm: tuple(res.shape)  # noqa: E731 - the cache key
        setattr(products, variant, cached(saved_obj[variant], by_rows, variant))
    try:
        yield
    finally:
        for name, fn in saved_mod.items():
            setattr(dp, name, fn)
        for name in saved_obj:
            products.__dict__.pop(name, None)


def launches(variant: str) -> int:
    """Launches per token the variant removes: its stand-in's calls over the warm-up and the capture (two
    steps), times the attention's two kernels (split and merge; one where it takes one split)."""
    return CALLS.get(variant, 0) // 2 * (2 if variant == "attn" else 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(VARIANTS), help="comma list of variants")
    a = ap.parse_args()

    import torch

    from orcd.cli.bench_session import OrcdSession
    from orcd.runner.decode_graphs import DecodeGraphs
    from orcd.runner.fused_decode import FusedDecoder

    s = OrcdSession(a.model, num_blocks=64, page=16)
    names = ["whole"] + [v for v in a.only.split(",") if v]
    for name in names:  # one graph each, captured with its launches left out
        fd = FusedDecoder(s.model, fuse_norm=True)
        with left_out(fd, name):
            graphs = DecodeGraphs(s.model, s.kv, s.page, s.width, scratch_block=s.width, buckets=(1,),
                                  step_fn=fd)
            graphs.capture()
        s.graphs[name] = graphs
    ms: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(a.rounds):
        for name in names:
            ms[name].append(1e3 / s.decode_graph(0, a.steps, name))
    whole = statistics.median(ms["whole"])
    rows = []
    for name in names:
        med = statistics.median(ms[name])
        n = 0 if name == "whole" else launches(name)
        saved = whole - med
        rows.append({"variant": name, "ms_per_token": med, "ms_rounds": ms[name], "launches_removed": n,
                     "saved_ms": saved, "saved_us_per_launch": 1e3 * saved / n if n else None})
    res = {"model": a.model, "device": torch.cuda.get_device_name(), "steps": a.steps, "rows": rows,
           "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("| variant | ms/token | tok/s | launches removed | saved ms | saved µs/launch |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        per = "" if r["saved_us_per_launch"] is None else f"{r['saved_us_per_launch']:.2f}"
        print(f"| {r['variant']} | {r['ms_per_token']:.3f} | {1e3 / r['ms_per_token']:.1f} | "
              f"{r['launches_removed']} | {r['saved_ms']:.3f} | {per} |")


if __name__ == "__main__":
    main()
