"""schemathesis against orcd's own OpenAPI schema on a live `orcd serve` (issue 8 item 2): no 5xx.

    python bench/serving/schemathesis_check.py [--max-examples 100] [--schemathesis PATH]
                                       [--out bench/results/schemathesis]

Starts `orcd serve` on a tiny random qwen2 GGUF (CPU, loopback, API key on), runs
`schemathesis run <url>/openapi.json --checks not_a_server_error` over every operation (all phases:
examples, coverage, fuzzing, stateful; bench/serving/schemathesis_hooks.py makes most bodies name the served
model), writes OUT.md with schemathesis's summary and the junit report,
and exits with schemathesis's status (non-zero on any 5xx). schemathesis is not an orcd dependency:
pass the path of its CLI (e.g. from a separate virtualenv) or have `schemathesis` on PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests" / d) for d in ("reliability", "")]
from live_server import LiveServer, tiny_model  # noqa: E402

KEY = "sk-schemathesis-check"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-examples", type=int, default=100)
    p.add_argument("--schemathesis", default=shutil.which("schemathesis") or "schemathesis")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/schemathesis")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="orcd-st-"))
    os.environ["ORCD_API_KEY"] = KEY
    srv = LiveServer(tiny_model(tmp / "st-qwen2.gguf"), tmp / "serve.log", "--max-num-seqs", "8",
                     "--max-queue", "64", "--no-warmup", "--api-key", KEY)
    try:
        srv.wait_ready()
        cmd = [args.schemathesis, "run", srv.url + "/openapi.json", "--checks", "not_a_server_error",
               "--max-examples", str(args.max_examples), "--seed", str(args.seed), "-H",
               f"Authorization: Bearer {KEY}", "--request-timeout", "60", "--continue-on-failure",
               "--report", "junit", "--report-junit-path", str(tmp / "junit.xml"), "--no-color"]
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "ORCD_ST_MODEL": srv.model_id,
               "PYTHONPATH": str(Path(__file__).resolve().parent)}
        t0 = time.monotonic()
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
        seconds = time.monotonic() - t0
        health = subprocess.run([sys.executable, "-c", f"import httpx; print(httpx.get('{srv.url}/health')"
                                 ".json()['status'])"], capture_output=True, text=True).stdout.strip()
    finally:
        code = srv.stop()
    log = srv.log()
    tail = run.stdout[-6000:]
    five = len(re.findall(r"HTTP/1.1\" 5\d\d", log)) + log.count("Traceback")
    md = ["# schemathesis vs orcd's OpenAPI schema (issue 8 item 2)", "",
          f"Command: `python bench/serving/schemathesis_check.py --max-examples {args.max_examples}` "
          f"(schemathesis {_version(args.schemathesis)}, check `not_a_server_error`, all phases, seed "
          f"{args.seed}). Tiny random qwen2 on CPU, API key on.", "",
          f"- schemathesis exit status: {run.returncode} ({seconds:.0f} s)",
          f"- server /health after: {health}; server exit status after SIGTERM: {code}",
          f"- tracebacks in the server log: {log.count('Traceback')}", "",
          "schemathesis summary:", "", "```", tail.strip(), "```"]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print(tail)
    ok = run.returncode == 0 and health == "ok" and code == 0 and five == 0
    return 0 if ok else 1


def _version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return out.strip().split()[-1] if out else "?"


if __name__ == "__main__":
    sys.exit(main())
