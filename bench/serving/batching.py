"""Continuous batching benchmark (issue 6): aggregate tokens/s at 1, 8, 32, 64 concurrent streams.

One process, one model file (Qwen2.5-0.5B-shaped Q4_K_M, synthesized unless --model), three sides:
the orcd engine alone (LLMEngine.step()), orcd through HTTP (`orcd serve` child, streaming
/v1/generate) and HF transformers' batched `generate` on the same shapes (bf16, random init) as the peer.
Writes OUT/batching.json, OUT/batching.md and OUT/batching.png (if matplotlib is there).

Usage: python bench/serving/batching.py [--out-dir bench/results] [--model F.gguf] [--concurrency 1,8,32,64]
       [--skip-hf] [--skip-http] [--max-seconds 420]
Smoke test on the CPU: python bench/serving/batching.py --small --concurrency 1,4 (writes under /tmp).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batching_common import Deadline, missing_modules  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = {"engine": 0.45, "http": 0.35, "hf": 0.20}  # shares of the time left after the model file exists


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=None,
                    help="default: bench/results on CUDA, else /tmp/orcd-batching-smoke")
    ap.add_argument("--model", default=None, help="GGUF to use (default: synthesize one in the out dir)")
    ap.add_argument("--concurrency", default="1,8,32,64", help="comma-separated stream counts")
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument("--small", action="store_true", help="tiny model (tiny-qwen2-256 preset): CPU smoke test")
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--warmup-len", type=int, default=16, help="new tokens per request in warm-up rounds")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="engine and server (orcd serve's default)")
    ap.add_argument("--enforce-eager", action="store_true", help="no decode CUDA graphs (engine and server)")
    ap.add_argument("--batch-invariant", choices=["seeded", "all", "off"], default="seeded",
                    help="engine and server policy; 'all' measures what batch-invariant kernels cost "
                         "(the default 'seeded' leaves this benchmark's unseeded requests on the fast path)")
    ap.add_argument("--max-seconds", type=float, default=420.0,
                    help="time guard for the whole run; later rounds are skipped or cut short past it")
    args = ap.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not args.concurrency or min(args.concurrency) < 1:
        ap.error("--concurrency needs positive integers")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.out_dir is None:
        smoke = args.small or args.device == "cpu"
        args.out_dir = "/tmp/orcd-batching-smoke" if smoke else str(REPO / "bench/results")
    return args


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def model_file(args: argparse.Namespace, out: Path) -> tuple[str, str]:
    """(path, shape name): --model, else a synthesized file (as `orcd synth --like NAME --quant Q4_K_M`)."""
    like = "tiny-qwen2-256" if args.small else "qwen2.5-0.5b"
    if args.model:
        return args.model, f"{Path(args.model).name}"
    path = out / f"{like}-Q4_K_M-synth.gguf"
    if not path.exists():
        from orcd.cli.synth import synth_like

        t0 = time.perf_counter()
        print(f"synthesizing {path} (orcd synth --like {like} --quant Q4_K_M) ...", flush=True)
        synth_like(str(path), like, "Q4_K_M")
        print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
    return str(path), f"{like}-shaped Q4_K_M"


def run_phase(name: str, args: argparse.Namespace, path: str, out: Path, deadline: Deadline) -> dict:
    c, p, g, w = args.concurrency, args.prompt_len, args.gen_len, args.warmup_len
    if name == "engine":
        from batching_engine import bench_engine

        return bench_engine(path, args.device, c, p, g, w, args.max_num_seqs, args.enforce_eager, deadline,
                            batch_invariant=args.batch_invariant)
    if name == "http":
        from batching_engine import kv_blocks_for
        from batching_http import bench_http

        serve_args = ["--max-num-seqs", str(args.max_num_seqs), "--max-queue", str(max(64, max(c))),
                      "--num-kv-blocks", str(kv_blocks_for(max(c), p, g))]
        serve_args += ["--enforce-eager"] if args.enforce_eager else []
        serve_args += ["--batch-invariant", args.batch_invariant]
        return bench_http(path, args.device, c, p, g, w, serve_args, out / "batching-server.log", deadline)
    from batching_hf import bench_hf

    return bench_hf(c, p, g, w, torch.device(args.device), args.small, deadline)


def run_all(args: argparse.Namespace, out: Path, t_start: float) -> dict:
    path, shape = model_file(args, out)
    dev = torch.device(args.device)
    result: dict = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.machine()})",
        "torch": torch.__version__, "commit": commit(), "command": " ".join(["python", *sys.argv]),
        "model_file": path, "model_shape": shape, "small": args.small, "concurrency": args.concurrency,
        "prompt_len": args.prompt_len, "gen_len": args.gen_len, "notes": [],
    }
    if args.small or dev.type == "cpu":
        result["notes"].append("SMOKE TEST (tiny model or CPU): not a GPU result")
    phases = [p for p in ("engine", "http", "hf") if not getattr(args, f"skip_{p}")]
    total = Deadline(t_start + args.max_seconds)
    for i, name in enumerate(phases):
        weight = WEIGHTS[name] / sum(WEIGHTS[p] for p in phases[i:])
        t0 = time.perf_counter()
        try:
            result[name] = run_phase(name, args, path, out, total.share(weight))
        except Exception as err:  # noqa: BLE001 - one failed side is recorded; the others still run
            traceback.print_exc()
            result[name] = {"error": f"{type(err).__name__}: {err}"[:2000], "rounds": {}}
        result[name]["phase_s"] = time.perf_counter() - t0
        if "error" in result[name]:
            result["notes"].append(f"{name} failed: {result[name]['error'][:300]}")
    skipped = [f"{p} C={c}" for p in phases for c, r in result[p].get("rounds", {}).items()
               if "skipped" in r or r.get("truncated")]
    if skipped:
        result["notes"].append("cut by the time guard: " + ", ".join(skipped))
    result["total_s"] = time.perf_counter() - t_start
    return result


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    args = parse_args(argv)
    phases = [p for p in ("engine", "http", "hf") if not getattr(args, f"skip_{p}")]
    missing = missing_modules(["engine", *[p for p in phases if p != "engine"]])
    if missing:
        print("batching: missing Python modules:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("batching: --device cuda but CUDA is not available (use --small --device cpu)",
              file=sys.stderr)
        return 2
    if args.device == "cpu":  # a shared, loaded CPU box: more threads only spin against each other
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"  # the `orcd serve` child too
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = run_all(args, out, t_start)
    from batching_report import terminal_table, write_markdown, write_plot

    (out / "batching.json").write_text(json.dumps(result, indent=1, default=str))
    note = write_plot(result, out / "batching.png")
    if note:
        result["notes"].append(note)
        (out / "batching.json").write_text(json.dumps(result, indent=1, default=str))
    write_markdown(result, out / "batching.md")
    print(f"\n{result['device']}, {result['model_shape']}, tok/s (total {result['total_s']:.0f} s):")
    print(terminal_table(result))
    for n in result["notes"]:
        print("note:", n)
    written = ["batching.json", "batching.md"] + ([] if note else ["batching.png"])
    print("wrote " + ", ".join(str(out / w) for w in written))
    return 1 if any("error" in result.get(p, {}) for p in phases) else 0


if __name__ == "__main__":
    sys.exit(main())
