"""gemma3 (or qwen3) decode through LLMEngine with the runner's decode graphs replaced by each step variant,
on one loaded engine: bench/peers/orcd_side.py's measure (the runner's own graphs: pick_step's choice),
then graphs of model.forward (the step before orcd/runner/fused_gemma3.py) and of QKNormDecoder with
other GEMV / norm-fused-layer row limits, the same decode rounds each; then torch.profiler over decode
steps of the default fused step (kernels grouped by name, us per step).

usage: python bench/kernels/gemma3_fused.py MODEL.gguf OUT_STEM [--streams 1,8,32,64] [--gemv-rows 8]
       [--fused-rows 64] [--profile 1,8]
Writes OUT_STEM.json and OUT_STEM.md; prints tok/s per stream count per variant, then the profiles.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_oss_profile  # noqa: E402
import kernel_table  # noqa: E402
import orcd_side  # noqa: E402

from orcd.runner.decode_graphs import DecodeGraphs  # noqa: E402
from orcd.runner.fused_gemma3 import GEMV_ROWS, QKNormDecoder  # noqa: E402


def use_step(eng, step_fn) -> float:
    """Replace the engine runner's decode graphs by graphs of step_fn (None: model.forward), same buckets,
    width and scratch block; returns the capture seconds."""
    runner = eng.runner
    old = runner.graph
    new = DecodeGraphs(runner.model, runner.kv, old.block_size, old.width, old.scratch_block, old.buckets,
                       step_fn)
    secs = new.capture()
    runner.graph = new
    return secs


def rounds(eng, streams: list[int], rng: random.Random) -> dict:
    for c in streams:  # warm-up, as measure does
        orcd_side.decode_round(eng, c, 128, 8, rng)
    return {str(c): orcd_side.decode_round(eng, c, 128, 128, rng) for c in streams}


def markdown(res: dict, streams: list[int]) -> str:
    names = list(res["variants"])
    lines = [f"# gemma3 fused decode step: {res['model']} on {res['device']}", "",
             f"`{res['command']}`", "",
             "decode tok/s, LLMEngine, 128-token prompts, 128 new tokens per stream", "",
             "| streams | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for c in streams:
        cells = [f"{res['variants'][n][str(c)]['decode_tok_s']:,.0f}" for n in names]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    for p in res["profile"]:
        head = f"## fused (default), {p['streams']} streams: {p['kernel_us_per_step']:,.0f} us kernels/step"
        lines += ["", head, "", "| kernel | us/step | calls/step |", "|---|---|---|"]
        lines += [f"| {r['kernel'][:70]} | {r['us_per_step']:.1f} | {r['calls_per_step']:.0f} |"
                  for r in p["kernels"][:14]]
    return "\n".join(lines) + "\n"


def plot(res: dict, streams: list[int], path: str) -> None:
    """Grouped bars: decode tok/s per stream count, one bar per variant (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = list(res["variants"])
    fig, ax = plt.subplots(figsize=(8, 4))
    w = 0.8 / len(names)
    for j, n in enumerate(names):
        xs = [i + (j - (len(names) - 1) / 2) * w for i in range(len(streams))]
        ax.bar(xs, [res["variants"][n][str(c)]["decode_tok_s"] for c in streams], w, label=n)
    ax.set_xticks(range(len(streams)), [str(c) for c in streams])
    ax.set_xlabel("streams")
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"gemma3 decode step variants, {res['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out_stem")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--gemv-rows", default="8", help="other GEMV row limits to run, comma-separated")
    ap.add_argument("--fused-rows", default="64", help="norm-fused layer row limits (batched_fused) to run")
    ap.add_argument("--profile", default="1,8")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    engines: list = []
    base = orcd_side.measure(a.model, streams, 128, 128, engines=engines)
    eng, rng = engines[0], random.Random(2)
    res = {"model": a.model, "device": base["device"], "prefill": base["prefill"],
           "command": "python3 bench/kernels/gemma3_fused.py " + " ".join(sys.argv[1:]),
           "variants": {f"fused gemv<={GEMV_ROWS} (default)": base["decode"]}}
    res["variants"]["model.forward"] = (use_step(eng, None), rounds(eng, streams, rng))[1]
    for k in (int(x) for x in a.gemv_rows.split(",") if x):
        use_step(eng, QKNormDecoder(eng.runner.model, gemv_rows=k))
        res["variants"][f"fused gemv<={k}"] = rounds(eng, streams, rng)
    for k in (int(x) for x in a.fused_rows.split(",") if x):
        use_step(eng, QKNormDecoder(eng.runner.model, fused_rows=k))
        res["variants"][f"fused layer<={k}"] = rounds(eng, streams, rng)
    use_step(eng, QKNormDecoder(eng.runner.model))
    res["profile"] = [gpt_oss_profile.profile_round(eng, int(s), rng) for s in a.profile.split(",") if s]
    Path(a.out_stem + ".json").write_text(json.dumps(res, indent=1))
    md = markdown(res, streams)
    Path(a.out_stem + ".md").write_text(md)
    plot(res, streams, a.out_stem + ".png")
    print(md)
    for p in res["profile"]:
        kernel_table.print_rows(p["kernels"], "step", 14, 80)


if __name__ == "__main__":
    main()
