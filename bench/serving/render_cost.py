"""Chat-template cost per request on the CPU (issue 19): ChatTemplate.render (one plain render),
render_spans (the text and where each message's content landed) and GGUFTokenizer.encode_chat (the
whole chat -> ids path of a chat request), with the model file's own template.

Usage: python bench/serving/render_cost.py [--model FILE.gguf] [--passes 7] [--calls 300] [--tag NAME]
Writes OUT/serving_render_cost.json (rows merged by tag) + .md; the median of the passes, CPU µs of
this process per call (process_time), and the range.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHORT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
TURNS = [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Write a haiku about the sea."},
         {"role": "assistant", "content": "Waves fold into foam,\nsalt wind carries gull voices,\nthe tide "
                                          "keeps its time."},
         {"role": "user", "content": "Now one about mountains, please, " * 8}]


def per_call_us(fn, calls: int, passes: int) -> tuple[float, float, float]:
    """(median, min, max) CPU µs per call over `passes` passes of `calls` calls."""
    fn()
    runs = []
    for _ in range(passes):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        runs.append((time.process_time() - t0) / calls * 1e6)
    return round(statistics.median(runs), 1), round(min(runs), 1), round(max(runs), 1)


def measure(model: str, calls: int, passes: int) -> list[dict]:
    from orcd.gguf import open_gguf
    from orcd.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(model).metadata)
    tpl = tok._template
    rows = []
    for name, msgs in (("1 message", SHORT), ("4 messages", TURNS)):
        for what, fn in (("render", lambda m=msgs: tpl.render(m)),
                         ("render_spans", lambda m=msgs: tpl.render_spans(m)),
                         ("encode_chat", lambda m=msgs: tok.encode_chat(m))):
            med, lo, hi = per_call_us(fn, calls, passes)
            rows.append({"call": what, "chat": name, "cpu_us": med, "min_us": lo, "max_us": hi})
            print(f"{what:13s} {name:10s} {med:8.1f} µs ({lo}-{hi})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(REPO / "orcd/assets/demo.gguf"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--tag", default="after")
    ap.add_argument("--out-dir", default="/tmp/orcd-serving")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    rows = [{"tag": args.tag, "commit": commit, **r} for r in measure(args.model, args.calls, args.passes)]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "serving_render_cost.json"
    old = json.loads(target.read_text()) if target.exists() else {"rows": []}
    result = {"machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, Python "
                         f"{platform.python_version()}", "model": args.model, "command": " ".join(sys.argv),
              "rows": [r for r in old["rows"] if r["tag"] != args.tag] + rows}
    target.write_text(json.dumps(result, indent=1))
    lines = ["# Chat template cost per call (CPU)", "", f"Machine: {result['machine']}; model "
             f"`{Path(args.model).name}`; CPU µs per call, median of {args.passes} passes (range).", "",
             "| tag | commit | call | chat | CPU µs | range |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['tag']} | {r['commit']} | {r['call']} | {r['chat']} | {r['cpu_us']} | "
              f"{r['min_us']}–{r['max_us']} |" for r in result["rows"]]
    (out / "serving_render_cost.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
