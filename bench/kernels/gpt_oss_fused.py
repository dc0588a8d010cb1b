"""gpt-oss decode through LLMEngine with and without the fused decode step (orcd/runner/fused_gpt_oss.py),
on one loaded engine: bench/peers/orcd_side.py's measure (the runner's own decode graphs), then the
runner's graphs replaced by DecodeGraphs of GptOssDecoder (captured here) and the same decode rounds again;
then torch.profiler over decode steps of the fused graphs (gpt_oss_profile.profile_round).

usage: python bench/kernels/gpt_oss_fused.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--profile 1,8]
Prints tok/s per stream count both ways, then the profiled kernels of the fused step.
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


def use_fused_step(eng, max_num_seqs: int) -> float:
    """Replace the engine runner's decode graphs (or its eager decode, where their capture failed) by
    graphs of the fused step, built as DecodeGraphs.for_engine builds them; returns the capture seconds."""
    runner = eng.runner
    scratch = runner.kv.k[0].shape[0] - 1  # the extra block past the block manager's ids
    width = table_width(eng.max_model_len, runner.block_size)  # as the engine gives the runner
    new = DecodeGraphs(runner.model, runner.kv, runner.block_size, width, scratch, buckets_for(max_num_seqs),
                       GptOssDecoder(runner.model))
    secs = new.capture()
    runner.graph = new
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--profile", default="1,8")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    engines: list = []
    res = {"model_forward": orcd_side.measure(a.model, streams, 128, 128, engines=engines)}
    eng = engines[0]
    res["runner_graphs"] = eng.runner.graph is not None and eng.runner.graph.fused  # False: model.forward
    res["fused_capture_s"] = use_fused_step(eng, max(64, max(streams)))  # measure's max_num_seqs
    rng = random.Random(2)
    for c in streams:  # warm-up, as measure does
        orcd_side.decode_round(eng, c, 128, 8, rng)
    res["fused"] = {str(c): orcd_side.decode_round(eng, c, 128, 128, rng) for c in streams}
    res["profile"] = [gpt_oss_profile.profile_round(eng, int(s), rng) for s in a.profile.split(",")]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("streams | model.forward tok/s | fused step tok/s")
    for c in streams:
        print(f"{c} | {res['model_forward']['decode'][str(c)]['decode_tok_s']:,.0f} | "
              f"{res['fused'][str(c)]['decode_tok_s']:,.0f}")
    for p in res["profile"]:
        print(f"-- fused, {p['streams']} streams: {p['kernel_us_per_step']:,.0f} us of kernels per step")
        kernel_table.print_rows(p["kernels"], "step", 14, 80)


if __name__ == "__main__":
    main()
