"""gpt-oss decode through LLMEngine with and without the fused decode step (orcd/runner/fused_gpt_oss.py),
on one loaded engine: bench/peers/orcd_side.py's measure (the runner's own decode graphs, whatever
decode_graphs.pick_step chose, and prefill), then the runner's graphs replaced by DecodeGraphs of
model.forward, then of GptOssDecoder (captured here), the same decode rounds on each; then torch.profiler
over decode steps of the fused graphs (gpt_oss_profile.profile_round).

usage: python bench/kernels/gpt_oss_fused.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--profile 1,8]
  [--int8] [--fuse-quant "o;o,h;all"] [--no-float]
Prints tok/s per stream count both ways, then the profiled kernels of the fused step. --int8: also the
fused step with GptOssDecoder(int8_moe=True) (fused_int8_moe) and with int8_attn=True as well (fused_int8),
each profiled.
--fuse-quant V1;V2;...: the fused int8 step (int8_moe and int8_attn) with fuse_quant off (fused_int8,
unless --int8 has it already) and with each variant's parts (fused_int8_fq_<parts>: "o", "o,h", "all",
...: GptOssDecoder's fuse_quant), each profiled: the A/B for FUSE_QUANT_DEFAULT.
--no-float: without the model.forward and float fused-step columns (the runner's own graphs are always
measured first).
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

from orcd.runner.decode_graphs import DecodeGraphs, buckets_for, table_width  # noqa: E402
from orcd.runner.fused_gpt_oss import GptOssDecoder  # noqa: E402


def use_step(eng, max_num_seqs: int, fused: bool, int8: tuple = (False, False)) -> float:
    """Replace the engine runner's decode graphs by graphs of the fused step (fused; int8: its
    GptOssDecoder flags int8_moe, int8_attn and optionally fuse_quant) or of model.forward, built as
    DecodeGraphs.for_engine builds them; returns the capture seconds."""
    runner = eng.runner
    scratch = runner.kv.k[0].shape[0] - 1  # the extra block past the block manager's ids
    width = table_width(eng.max_model_len, runner.block_size)  # as the engine gives the runner
    step = GptOssDecoder(runner.model, *int8) if fused else None
    runner.graph = None  # the old graphs' memory goes before the new ones are captured
    new = DecodeGraphs(runner.model, runner.kv, runner.block_size, width, scratch, buckets_for(max_num_seqs),
                       step)
    secs = new.capture()
    runner.graph = new
    return secs


def rounds(eng, streams: list[int], rng: random.Random) -> dict:
    """Decode tok/s at each stream count (orcd_side.decode_round, after a warm-up round of each)."""
    for c in streams:
        orcd_side.decode_round(eng, c, 128, 8, rng)
    return {str(c): orcd_side.decode_round(eng, c, 128, 128, rng) for c in streams}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--profile", default="1,8")
    ap.add_argument("--int8", action="store_true", help="also the fused step with int8_moe (and int8_attn)")
    ap.add_argument("--fuse-quant", default="",
                    help="';'-separated fuse_quant variants ('all' = every part), each beside fuse_quant off")
    ap.add_argument("--no-float", action="store_true", help="skip the model.forward and float fused steps")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    engines: list = []
    res: dict = {"runner": orcd_side.measure(a.model, streams, 128, 128, engines=engines)}
    eng = engines[0]
    graph = eng.runner.graph
    res["runner_step"] = type(graph.step_fn).__name__ if graph is not None and graph.fused else (
        "model.forward" if graph is not None else "eager (graph capture failed)")
    rng = random.Random(2)
    steps = [] if a.no_float else [("model_forward", False, (False, False)), ("fused", True, (False, False))]
    steps += [("fused_int8_moe", True, (True, False)), ("fused_int8", True, (True, True))] if a.int8 else []
    if a.fuse_quant:
        steps += [] if a.int8 else [("fused_int8", True, (True, True, False))]
        for v in a.fuse_quant.split(";"):
            steps += [(f"fused_int8_fq_{v.replace(',', '_')}", True, (True, True, True if v == "all" else v))]
    for name, fused, int8 in steps:
        res[name + "_capture_s"] = use_step(eng, max(64, max(streams)), fused, int8)  # measure's max seqs
        res[name] = rounds(eng, streams, rng)
        if fused:  # the profile of each fused step, its graphs still in place
            res["profile" + name[5:]] = [gpt_oss_profile.profile_round(eng, int(s), rng)
                                         for s in a.profile.split(",") if s]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"streams | runner's own graphs ({res['runner_step']}) | " + " | ".join(n for n, _, _ in steps)
          + " (tok/s)")
    for c in map(str, streams):
        row = [res["runner"]["decode"][c]] + [res[name][c] for name, _, _ in steps]
        print(c, *(f"{r['decode_tok_s']:,.0f}" for r in row), sep=" | ")
    for key in [k for k in res if k.startswith("profile")]:
        for p in res[key]:
            print(f"-- {key}, {p['streams']} streams: {p['kernel_us_per_step']:,.0f} us of kernels per step")
            kernel_table.print_rows(p["kernels"], "step", 14, 80)


if __name__ == "__main__":
    main()
