"""gpt-oss decode through LLMEngine (bench/peers/orcd_side.py's measure: same rounds, same JSON) and, on
the same loaded engine, where one decode step's GPU time goes: torch.profiler over 16 decode steps at
each of --profile streams (replayed from CUDA graphs; the prompts' prefill not profiled), kernels
grouped by name, µs per step.

usage: python bench/kernels/gpt_oss_profile.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--profile 1,64]
Prints per profiled batch: the top kernels (µs per step, calls per step, share) and the total.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
import kernel_table  # noqa: E402
import orcd_side  # noqa: E402

from orcd.engine.io import EngineRequest  # noqa: E402
from orcd.engine.sampling_params import SamplingParams  # noqa: E402


def profile_round(eng, streams: int, rng: random.Random, gen: int = 24) -> dict:
    """Kernels per decode step of `streams` requests: the prompts' prefill steps run first, unprofiled,
    then `gen - 8` decode steps under the profiler."""
    sp = SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True)
    ids = [f"prof{streams}-{i}" for i in range(streams)]
    for rid in ids:
        eng.add_request(EngineRequest(rid, orcd_side._ids(rng, 128, eng.cfg.vocab_size), sp))
    first: set[str] = set()
    while len(first) < streams:
        first |= {ev.request_id for ev in eng.step() if ev.token_id is not None}
    steps = gen - 8
    orcd_side._sync()
    acts = [ProfilerActivity.CUDA if orcd_side.DEV == "cuda" else ProfilerActivity.CPU]  # CPU: a smoke test
    with profile(activities=acts) as prof:
        for _ in range(steps):
            eng.step()
        orcd_side._sync()
    while eng.has_work():
        eng.step()
    us_per_step, rows = kernel_table.kernel_rows(prof, steps, "step", 100)
    return {"streams": streams, "steps": steps, "kernel_us_per_step": us_per_step, "kernels": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--profile", default="1,64")
    a = ap.parse_args()
    engines: list = []  # the engine measure() builds, kept for the profile rounds
    res = orcd_side.measure(a.model, [int(s) for s in a.streams.split(",")], 128, 128, engines=engines)
    rng = random.Random(1)
    res["profile"] = [profile_round(engines[0], int(s), rng) for s in a.profile.split(",")]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for p in res["profile"]:
        print(f"-- {p['streams']} streams: {p['kernel_us_per_step']:,.0f} us of kernels per step "
              f"(decode steps only)")
        kernel_table.print_rows(p["kernels"], "step", 12, 80)


if __name__ == "__main__":
    main()
