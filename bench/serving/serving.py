"""Serving benchmark (issue 19): the engine alone vs `orcd serve` over HTTP, and a mixed load.

For each model file: an engine in this process (LLMEngine.step(), serving_engine.py) and a real
`orcd serve` child on loopback, both shaped alike (KV pool, batch limits, CUDA graphs captured at start),
measured alternately on the same requests: streamed `/v1/generate` and `/v1/chat/completions` at
1/8/32/64 streams (greedy, ignore_eos, prompt_len in, gen_len out), each repeat engine round then HTTP
round; then a mixed load: log-normal prompt and output lengths, Poisson arrivals at fractions of the
engine's 64-stream token rate, engine alone then HTTP per rate. The client is serving_client.py: raw
sockets in --client-procs processes; each row records how busy they were.
Each --server 'TAG=CHECKOUT[@PATH] [ARG...]' is measured in turn against the same engine figures (an older
checkout for a before/after table; @PATH: more PYTHONPATH for that server only, e.g. optional packages).
Rows go to OUT/serving.json (merged with what is there: same tag+model rows are replaced), + .md, .png.

Usage: python bench/serving/serving.py --model 0.5b=/tmp/a.gguf [--model 7b=/tmp/7b.gguf]
       [--server before=/tmp/old-checkout --server after=.] [--api-processes 1,2,4]
CPU smoke: python bench/serving/serving.py --device cpu --streams 1,4 --gen-len 16 --out-dir /tmp/s
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batching import commit  # noqa: E402
from batching_common import Deadline  # noqa: E402
from serving_run import run_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=None, metavar="NAME=PATH",
                    help="model file (repeatable); default: the bundled demo model")
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument("--routes", default="generate,chat")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--min-round-tokens", type=int, default=512,
                    help="each fixed round generates at least this many tokens: at C streams a request's "
                         "output is max(gen-len, this / C) (one 128-token request, ~0.14 s at one stream, "
                         "swung +-15 %% round to round with the engine alone)")
    ap.add_argument("--warmup-len", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="rounds per point (engine and HTTP): the median")
    ap.add_argument("--mixed-rates", default="0.25,0.5,0.9",
                    help="Poisson rates as fractions of the engine's top token rate / mean output length; "
                         "empty: no mixed load")
    ap.add_argument("--mixed-routes", default="chat")
    ap.add_argument("--mixed-tags", default="after", help="servers (tags) the mixed load runs on")
    ap.add_argument("--mixed-seconds", type=float, default=8.0,
                    help="arrivals span this long, per rate (engine and HTTP each)")
    ap.add_argument("--mixed-prompt", default="128,16,1024", help="median,min,max prompt tokens")
    ap.add_argument("--mixed-output", default="128,16,512", help="median,min,max output tokens")
    ap.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    ap.add_argument("--slo-tpot-ms", type=float, default=50.0)
    ap.add_argument("--client-procs", type=int, default=min(4, max(1, (os.cpu_count() or 2) // 4)))
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `orcd serve` argument")
    ap.add_argument("--server", action="append", default=None, metavar="'TAG=CHECKOUT[@PATH] [ARG...]'",
                    help="an `orcd serve` to measure, with serve arguments of its own (repeatable; "
                         "default: after=this checkout)")
    ap.add_argument("--api-processes", default=None, metavar="N[,N...]",
                    help="measure each --server with `orcd serve --api-processes N` for each N, tagged "
                         "TAG-apiN")
    ap.add_argument("--skip-engine", action="store_true", help="HTTP only (engine_tok_s left empty)")
    ap.add_argument("--out-dir", default=None, help="default: bench/results on CUDA, else /tmp/orcd-serving")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="time guard: later rounds are skipped")
    args = ap.parse_args(argv)
    to_ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    args.streams, args.routes = to_ints(args.streams), [r for r in args.routes.split(",") if r]
    args.mixed_routes = [r for r in args.mixed_routes.split(",") if r]
    args.mixed_rates = [float(x) for x in args.mixed_rates.split(",") if x.strip()]
    args.mixed_prompt = tuple(to_ints(args.mixed_prompt))
    args.mixed_output = tuple(to_ints(args.mixed_output))
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.out_dir is None:
        args.out_dir = str(REPO / "bench/results") if args.device == "cuda" else "/tmp/orcd-serving"
    args.models = [_named(m) for m in (args.model or [str(REPO / "orcd/assets/demo.gguf")])]
    args.servers = [_server(s) for s in (args.server or [f"after={REPO}"])]
    args.mixed_tags = [t for t in args.mixed_tags.split(",") if t]
    if args.api_processes:
        counts = to_ints(args.api_processes)
        args.mixed_tags = [f"{t}-api{n}" for t in args.mixed_tags for n in counts]
        args.servers = [(f"{tag}-api{n}", repo, extra, own + ["--api-processes", str(n)])
                        for tag, repo, extra, own in args.servers for n in counts]
    return args


def _server(spec: str) -> tuple[str, Path, tuple[str, ...], list[str]]:
    head, *serve_args = shlex.split(spec)
    tag, _, rest = head.partition("=")
    repo, _, extra = rest.partition("@")
    return tag, Path(repo).resolve(), tuple(p for p in extra.split(os.pathsep) if p), serve_args


def _named(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    return (name, path) if sep else (Path(spec).stem, spec)


def merge(old: dict, new: dict) -> dict:
    """New rows replace old rows of the same (tag, model); runs are kept per (tag, model) too."""
    keys = {(r["tag"], r["model"]) for r in new["rows"] + new["mixed"]}
    out = {k: [r for r in old.get(k, []) if (r.get("tag"), r.get("model")) not in keys] + new[k]
           for k in ("rows", "mixed")}
    out["runs"] = [r for r in old.get("runs", []) if (r.get("tag"), r.get("model")) not in keys] + new["runs"]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)  # a shared CPU box: the engine, the server and the clients share 2 cores
        os.environ["OMP_NUM_THREADS"] = "1"
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline.after(args.max_seconds)
    failed = False
    for name, path in args.models:
        new: dict = {"rows": [], "mixed": [], "runs": []}
        for run, rows, mixed in run_model(args, name, path, out, deadline):
            new["rows"] += rows
            new["mixed"] += mixed
            command = " ".join(["python", *sys.argv])
            new["runs"].append({**run, "model": name, "commit": commit(), "command": command})
            failed |= bool(run.get("error"))
        write(out, new)  # after every model: a later one that runs out of time loses only its own rows
    return 1 if failed else 0


def write(out: Path, new: dict) -> None:
    target = out / "serving.json"
    old = json.loads(target.read_text()) if target.exists() else {}
    result = merge(old, new)
    target.write_text(json.dumps(result, indent=1, default=str))
    from serving_report import write_markdown, write_plot

    write_markdown(result, out / "serving.md")
    note = write_plot(result, out / "serving.png")
    print(f"wrote {target}, serving.md" + ("" if note else ", serving.png") + (f" ({note})" if note else ""))


if __name__ == "__main__":
    sys.exit(main())
