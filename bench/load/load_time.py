"""File to first token, phase by phase; every sample is a fresh process (what starting a server pays).

    python bench/load/load_time.py --file F.gguf [--runs 3] [--device cuda] [--profile] [--serial]
        [--switch SECONDS] [--option NAME=VALUE ...]

--serial: no side threads (LoadOptions(overlap=False): tokenizer before the weights, no CUDA warm-up);
--switch: the GIL switch interval while loading (LoadOptions.switch_interval; 0 = leave it);
--option: any LoadOptions field, e.g. --option wait_ctx=False (VALUE: a Python literal).

Each sample prints one JSON line: imports (torch + orcd), load_model and its phases (LoadedModel.phases:
open, check, weights, tokenizer [built on a side thread during weights], tokenizer_wait), timeline
(LoadedModel.timeline: when each phase ended), load_cpu (CPU seconds of all threads during load_model),
kv (cache allocation), first_token (an 8-token eager prefill + argmax .item(): CUDA/Triton/cuBLAS
warm-up), second_token (the same again, warm), encode (first tokenizer.encode of a short prompt) and
total = load + kv + first_token (bench/decode/graph_vs_hf.py's load_to_first_token_s). --profile also
prints the top functions of load_model and of the first forward by cumulative time (cProfile) to stderr.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time


def load_options(serial: bool, switch: float | None, settings: list[str]):
    """--serial, --switch and ["field=literal", ...] -> orcd.loading.loader.LoadOptions."""
    from orcd.loading.loader import LoadOptions

    fields = {name: ast.literal_eval(value) for name, value in (item.split("=", 1) for item in settings)}
    if serial:
        fields["overlap"] = False
    if switch is not None:
        fields["switch_interval"] = switch or None
    return LoadOptions(**fields)


def child(path: str, device: str, profile: bool, serial: bool, switch: float | None,
          settings: list[str]) -> None:
    t = time.perf_counter()
    import torch

    from orcd.cli.bench_session import OrcdSession
    from orcd.loading.loader import load_model

    options = load_options(serial, switch, settings)

    imports = time.perf_counter() - t
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    s = OrcdSession.__new__(OrcdSession)
    loaded = load_model(path, device, options=options)
    t1, c1 = time.perf_counter(), time.process_time()
    if profile:
        prof.disable()
        print("== load_model", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    # the rest of OrcdSession.__init__ (KV allocation and block tables), timed on its own
    real_load = sys.modules["orcd.cli.bench_session"].load_model
    sys.modules["orcd.cli.bench_session"].load_model = lambda *a, **k: loaded
    try:
        OrcdSession.__init__(s, path, num_blocks=64, page=16, device=device)
    finally:
        sys.modules["orcd.cli.bench_session"].load_model = real_load
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    if profile:
        prof = cProfile.Profile()
        prof.enable()
    tok = s.first_token(8)
    t3 = time.perf_counter()
    if profile:
        prof.disable()
        print("== first_token", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(60)
    s.first_token(8)
    t4 = time.perf_counter()
    loaded.tokenizer.encode("The capital of France is")
    t5 = time.perf_counter()
    phases = {k: round(v, 4) for k, v in getattr(loaded, "phases", {}).items()}
    print(json.dumps({"imports": round(imports, 4), "load_model": round(loaded.load_seconds, 4),
                      "load_cpu": round(c1 - c0, 4),
                      "phases": phases, "timeline": {k: round(v, 4) for k, v in loaded.timeline.items()},
                      "kv": round(t2 - t1, 4), "first_token": round(t3 - t2, 4),
                      "second_token": round(t4 - t3, 4), "encode": round(t5 - t4, 4),
                      "total": round(t3 - t0, 4), "token": tok}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", action="store_true", help="cProfile the first forward (one run)")
    ap.add_argument("--serial", action="store_true", help="no side threads while loading")
    ap.add_argument("--switch", type=float, default=None, help="GIL switch interval while loading (s)")
    ap.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                    help="a LoadOptions field in the child, e.g. wait_ctx=False")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.file, args.device, args.profile, args.serial, args.switch, args.option)
    for i in range(args.runs):
        cmd = [sys.executable, __file__, "--child", "--file", args.file, "--device", args.device]
        cmd += ["--serial"] if args.serial else []
        cmd += ["--switch", str(args.switch)] if args.switch is not None else []
        cmd += ["--profile"] if args.profile and i == args.runs - 1 else []
        cmd += [f"--option={item}" for item in args.option]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
