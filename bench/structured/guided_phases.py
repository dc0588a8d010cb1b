"""Where a decode step with grammar rows spends its time: host phases of LLMEngine.step() and the device's
idle time between kernels, C streams all held to a JSON schema (greedy, the default auto path), against
the same streams free.

Host phases (ms per decode step, wall): the draw of the step in flight (GuidedInFlight.draw: masks filled
while the forward runs, the draw, the step's sync and check), Scheduler.advance + schedule, the launch
of the next step (ModelRunner.launch), the wait for the step before's tokens (LLMEngine._wait: the device's
time left, once the draw did not sync), their events (LLMEngine._resolve). Device: from
torch.profiler's kernel timeline over --profile-steps steps, the kernel time and the gaps between
kernels (the device idle, waiting for the host) per step.

    python bench/structured/guided_phases.py --model q.gguf --out OUT.json [--streams 64] [--steps 128]
        [--schema plain|bounded] [--text-prompts] [--cprofile] [--rounds 1]

--text-prompts: each stream gets reject_rate.prompts' text that leads into the schema's JSON (for a real
model, whose greedy walk then follows the JSON it would write); by default 32 random token ids (random
weights write random strings either way). --cprofile: after the timed rows, one more constrained run at the
largest stream count under cProfile (its host functions by own time, into OUT with .cprofile.txt; the
profiler slows Python calls, so its times are for shares, not the step).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from mask_cost import SCHEMAS  # noqa: E402
from reject_rate import prompts  # noqa: E402


class Phases:
    """Wraps methods to sum their wall time (ms) by name."""

    def __init__(self):
        self.ms: dict[str, float] = defaultdict(float)

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.ms[label] += 1e3 * (time.perf_counter() - t0)

        setattr(owner, name, timed)


def device_timeline(prof, steps: int) -> dict:
    """Kernel busy time and idle gaps (ms per step) from the profiler's CUDA kernel events."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    busy = idle = 0.0
    end = None
    for s, e in spans:  # merged intervals: busy inside, idle between
        if end is None or s > end:
            idle += s - end if end is not None else 0.0
            busy, end = busy + e - s, e
        elif e > end:
            busy, end = busy + e - end, e
    return {"kernel_ms_per_step": busy / 1e3 / steps, "idle_ms_per_step": idle / 1e3 / steps}


def one(engine, c: int, held: bool, steps: int, profile_steps: int, seed: int, schema: str = "plain",
        text: bool = False, host_profile: cProfile.Profile | None = None) -> dict:
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams
    from orcd.structured.grammars import json_schema_grammar

    grammar = json_schema_grammar(SCHEMAS[schema], "schema") if held else None
    sp = SamplingParams(max_tokens=steps, temperature=0.0, grammar=grammar, ignore_eos=not held)
    rng = random.Random(seed)
    vocab = engine.tokenizer.vocab_size
    texts = prompts(engine.tokenizer, c) if text else None
    for i in range(c):
        prompt = texts[i] if text else [rng.randrange(100, vocab - 100) for _ in range(32)]
        engine.add_request(EngineRequest(f"{seed}-{i}", prompt, sp))
    engine.step()  # the prefill step
    phases = Phases()
    from orcd.engine.llm_engine import LLMEngine
    from orcd.engine.scheduler import Scheduler
    from orcd.runner import executors
    from orcd.runner.model_runner import ModelRunner
    from orcd.structured import guide

    saved = [(o, n, getattr(o, n)) for o, n in [
        (executors.GuidedInFlight, "draw"), (guide.GuidedStep, "__init__"), (guide.GuidedStep, "rejected"),
        (guide.GuidedStep, "single"), (Scheduler, "advance"), (Scheduler, "schedule"),
        (ModelRunner, "launch"), (LLMEngine, "_wait"), (LLMEngine, "_resolve"), (LLMEngine, "step")]]
    for o, n, _ in saved:
        phases.wrap(o, n, f"{o.__name__}.{n}")
    n = 0
    t0 = time.perf_counter()
    try:
        if host_profile is not None:
            host_profile.enable()
        while engine.has_work() and n < steps - profile_steps - 4:
            engine.step()
            n += 1
        if host_profile is not None:
            host_profile.disable()
        wall = (time.perf_counter() - t0) / max(n, 1)
        cuda = torch.cuda.is_available()
        acts = [torch.profiler.ProfilerActivity.CUDA] if cuda else [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(profile_steps):
                engine.step()
            torch.cuda.synchronize() if cuda else None
    finally:
        if host_profile is not None:
            host_profile.disable()  # again where a step raised: a no-op otherwise
        for o, name, fn in saved:
            setattr(o, name, fn)
    while engine.has_work():
        engine.step()
    row = {"streams": c, "held": held, "schema": schema, "text_prompts": text, "ms_per_step": 1e3 * wall}
    row |= {f"host_{k}": v / (n + profile_steps) for k, v in phases.ms.items()}
    return row | device_timeline(prof, profile_steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--streams", default="64")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--profile-steps", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no device timeline)")
    ap.add_argument("--schema", default="plain", choices=sorted(SCHEMAS))
    ap.add_argument("--text-prompts", action="store_true",
                    help="prompts in words that lead into the JSON (for real weights); default random ids")
    ap.add_argument("--rounds", type=int, default=1, help="the free and constrained runs, this many times")
    ap.add_argument("--cprofile", action="store_true",
                    help="one more constrained run at the most streams under cProfile: OUT.cprofile.txt")
    args = ap.parse_args()
    from orcd.engine.llm_engine import LLMEngine
    from orcd.loading.loader import load_model

    loaded = load_model(args.model, args.device)
    cs = [int(c) for c in args.streams.split(",")]
    engine = LLMEngine(loaded, num_kv_blocks=max(cs) * 12 + 16, max_num_seqs=max(64, max(cs)),
                       enable_prefix_caching=False)
    engine.grammars().lltok  # noqa: B018 - built before timing
    one(engine, max(cs), True, 24, 4, 0, args.schema, args.text_prompts)  # warm-up: compiles, first masks
    rows = []
    for rnd, c in [(r, c) for r in range(args.rounds) for c in cs]:
        for held in (False, True):
            r = one(engine, c, held, args.steps, args.profile_steps, c, args.schema, args.text_prompts)
            r["round"] = rnd
            rows.append(r)
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                  flush=True)
    if args.cprofile:
        host = cProfile.Profile()
        one(engine, max(cs), True, args.steps, args.profile_steps, 7, args.schema, args.text_prompts, host)
        text = io.StringIO()
        pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(45)
        Path(args.out).with_suffix(".cprofile.txt").write_text(text.getvalue())
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    res = {"device": dev, "command": " ".join(["python", *sys.argv]), "rows": rows}
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
