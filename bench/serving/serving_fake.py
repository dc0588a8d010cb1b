"""HTTP ÷ engine on any CPU, with the fake engine (fake_engine.py) in place of the model (issue 19).

The engine process sleeps each step as long as the H100 takes for the 0.5B shape, so the API process(es)
see the H100's token rate while the engine costs almost no CPU: what the HTTP side loses shows on a
2-core box. The engine-alone figure is the same fake engine stepped in this process, on the same requests,
alternating with the HTTP rounds as in serving.py. Each --server 'TAG [ARG...]' is `orcd serve` arguments
(e.g. --api-processes 2, or fake_serve.py's --fake-capture-ms 100 --fake-lazy-graphs: prefill graphs
captured lazily, as before they were captured at engine start); rows as serving.py's, printed and written
to OUT/serving_fake.json. Not a GPU figure: it tells where the API process is the limit.

A tag TAG@CHECKOUT runs that checkout's orcd (e.g. an older commit, for a before/after pair).
--fake-eager-ms X: a step admitting a cached prompt prefix costs X ms more (the real engine runs it
eagerly; 17.6 on the H100 for the 0.5B); a server's own --fake-min-prefix-hit 0 takes every cached prefix
(the engine before issue 19's fix) where the default recomputes short ones. Each server's prefix-cache
counters (/metrics) are printed under the table.

Usage: python bench/serving/serving_fake.py --server 'api1' --server 'api2 --api-processes 2' \
           [--model F.gguf] [--streams 1,8,32,64] [--routes generate,chat] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batching_common import Deadline  # noqa: E402
from batching_http import ServerProcess  # noqa: E402
from fake_engine import FakeBuild, prefix_rule  # noqa: E402
from serving_client import run_load  # noqa: E402
from serving_engine import EngineBench  # noqa: E402
from serving_run import http_rows, warm_rounds  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(REPO / "orcd/assets/demo.gguf"), help="header only: tokenizer")
    ap.add_argument("--server", action="append", default=None, metavar="'TAG [ARG...]'")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--routes", default="generate,chat")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--warmup-len", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client-procs", type=int, default=1)
    ap.add_argument("--out-dir", default="/tmp/orcd-serving")
    for name, default in (("base", 0.95), ("row", 0.057), ("prefill", 0.01)):  # fake_engine.FakeBuild's
        ap.add_argument(f"--fake-{name}-ms", type=float, default=default,
                        help="the fake step's timing, for the engine side and every server alike")
    ap.add_argument("--fake-eager-ms", type=float, default=0.0,
                    help="a step admitting a cached prompt prefix costs this much more (H100 0.5B: 17.6)")
    ap.add_argument("--fake-min-prefix-hit", type=int, default=None,
                    help="cached prefixes shorter than this are recomputed (default: the engine's; 0: none)")
    args = ap.parse_args(argv)
    args.streams = [int(x) for x in args.streams.split(",")]
    args.routes = args.routes.split(",")
    args.servers = [shlex.split(s) for s in (args.server or ["api1"])]
    return args


def prefix_counters(url: str) -> dict:
    """The server's prefix-cache counters (/metrics): prompt tokens served from cached blocks, and cached
    tokens recomputed instead (prefixes under the engine's min_prefix_hit)."""
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {}
    for key in ("prefix_cache_hits", "prefix_cache_recomputed"):
        vals = [float(ln.split()[1]) for ln in text.splitlines() if ln.startswith(f"orcd_{key}_total ")]
        out[key] = int(vals[0]) if vals else None
    return out


def markdown(rows: list[dict], command: str) -> str:
    import platform

    lines = [f"`{command}` on {platform.machine()}, {os.cpu_count()} cores (fake engine: CPU figures)", "",
             "| server | route | streams | engine tok/s | HTTP tok/s | HTTP ÷ engine | TTFT p50 ms "
             "| ITL p50 / p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['tag']} | {r['route']} | {r['streams']} | {r['engine_tok_s'] or 0:,.0f} | "
              f"{r['http_tok_s'] or 0:,.0f} | {r['http_over_engine'] or 0:.2f} | {r['ttft_p50_ms']} | "
              f"{r['itl_p50_ms']} / {r['itl_p99_ms']} |" for r in rows]
    tags = {r["tag"]: r.get("server_prefix") for r in rows}
    lines += ["", *(f"- {t}: prefix-cache tokens over the server's run (warm-up included): {c}"
                    for t, c in tags.items() if c)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    args = parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    timing = (args.fake_base_ms, args.fake_row_ms, args.fake_prefill_ms)
    prefix = {"eager_ms": args.fake_eager_ms, **prefix_rule(args.fake_min_prefix_hit)}
    engine = EngineBench(FakeBuild(Path(args.model), *timing, **prefix).build())  # graphs all captured
    fake_args = [f"--fake-{n}-ms={v}" for n, v in zip(("base", "row", "prefill", "eager"),
                                                      (*timing, args.fake_eager_ms), strict=True)]
    if args.fake_min_prefix_hit is not None:
        fake_args.append(f"--fake-min-prefix-hit={args.fake_min_prefix_hit}")
    tok, rows = load_tokenizer(open_gguf(args.model).metadata), []
    for head, *serve_args in args.servers:
        tag, _, repo = head.partition("@")  # TAG@CHECKOUT: that checkout's orcd (a before/after pair)
        server = ServerProcess(args.model, "cpu", ["--served-model-name", "m", *fake_args, *serve_args],
                               out / f"serving-fake-{tag}.log", repo=Path(repo).resolve() if repo else REPO)
        server.cmd = [sys.executable, str(Path(__file__).with_name("fake_serve.py")), *server.cmd[4:]]
        try:
            server.start(timeout_s=120)
            for reqs in warm_rounds(args, "m", tok):
                run_load("127.0.0.1", server.port, reqs, args.client_procs)
            measured = http_rows(args, "m", tag, tok, server.port, engine, Deadline.after(3600))
            counters = prefix_counters(server.url)
            rows += [{**r, "server_prefix": counters} for r in measured]
        finally:
            server.stop()
    (out / "serving_fake.json").write_text(json.dumps(rows, indent=1))
    (out / "serving_fake.md").write_text(markdown(rows, " ".join(["python", *sys.argv])))
    print(markdown(rows, ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
