"""A request arriving mid-generation: the step that prefills it beside the running decodes.

usage: python bench/bench_split_step.py MODEL.gguf [OUT.json]
(e.g. after `python3 -m orcd.cli.main synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/q.gguf`)

With R requests decoding (64-token prompts, long max_tokens), one new P-token prompt is added and the
next LLMEngine.step is timed (device synchronized): it holds R decode rows and the new prompt. Measured
with the split (ModelRunner._split_step: the prompt from a prefill CUDA graph, the decode rows from a
decode graph) and without it (the same engine, the split switched off: one eager step), alternating, and
a decode-only step of the same R rows for reference. Prints one JSON object (also written to OUT.json).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time

import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model

LONG = SamplingParams(max_tokens=4000, temperature=0.0, ignore_eos=True)
ONE = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
_rid = [0]


def add(eng: LLMEngine, plen: int, params: SamplingParams) -> None:
    _rid[0] += 1
    eng.add_request(EngineRequest(f"r{_rid[0]}", [random.randrange(100, eng.cfg.vocab_size - 100)
                                                  for _ in range(plen)], params))


def timed_step(eng: LLMEngine) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    eng.step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(eng: LLMEngine, plen: int, reps: int) -> dict:
    """ms of the arrival step with and without the split, alternating, and of a decode-only step."""
    runner = eng.runner
    split = runner._split_step
    out: dict[str, list[float]] = {"split": [], "eager": [], "decode_only": []}
    for i in range(2 * reps + 2):
        mode = "split" if i % 2 else "eager"
        runner._split_step = split if mode == "split" else (lambda *a: None)
        add(eng, plen, ONE)
        before = runner.split_steps
        t = timed_step(eng)  # the new prompt (its one token) beside the running decodes
        assert (runner.split_steps > before) == (mode == "split"), "the step was not what was asked"
        if i >= 2:  # the first of each: graph capture / first use
            out[mode].append(t)
        out["decode_only"].append(timed_step(eng))
    runner._split_step = split
    return {k: {"median_ms": round(statistics.median(v) * 1e3, 3), "best_ms": round(min(v) * 1e3, 3)}
            for k, v in out.items()}


def main() -> None:
    path, out_path = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    random.seed(0)
    eng = LLMEngine(load_model(path, "cuda"), num_kv_blocks=4096, max_num_seqs=64)
    res: dict = {"device": torch.cuda.get_device_name(), "rows": {}}
    for running, plen in ((8, 128), (32, 256), (32, 512), (60, 256)):
        while len(eng.scheduler.running) < running:
            add(eng, 64, LONG)
            eng.step()  # its prefill
        res["rows"][f"{running} decoding + {plen}-token prompt"] = measure(eng, plen, reps=8)
        print(json.dumps({f"{running}+{plen}": res["rows"][f"{running} decoding + {plen}-token prompt"]}),
              flush=True)
    if out_path:
        with open(out_path, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
