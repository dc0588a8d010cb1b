"""Turn tp_scaling.py outputs (OUT/<name>/tp.json) into bench/results files.

    python bench/tp/report.py --run 7b=RUN/7b/tp.json --run 72b=RUN/72b/tp.json --tag h100x4 \
        --commit abc1234 --command "bash bench/tp/tp72_device_run.sh"

Writes bench/results/tp_<tag>.json (every row, plus the command and commit), tp_<tag>.md (one table per
model: decode tok/s by streams and TP, the speed-up over TP=1) and bench/results/peers_tp.json: rows
{model, streams, metric, orcd, llama_cpp, device, tp} (llama_cpp null where it was not run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MODELS = {"7b": "qwen2.5-7b (synth, Q4_K_M)", "72b": "qwen2.5-72b (synth, Q4_K_M)"}


def _table(name: str, rows: list[dict]) -> list[str]:
    ranks = sorted({r["ranks"] for r in rows})
    streams = sorted({r["decode_streams"] for r in rows})
    tok = {(r["ranks"], r["decode_streams"]): r["decode_tok_s"] for r in rows}
    head = "| streams | " + " | ".join(f"TP={n} tok/s" for n in ranks) + " | " + \
        " | ".join(f"TP={n} / TP=1" for n in ranks if n > 1) + " |"
    out = [f"### {MODELS.get(name, name)}, {rows[0].get('gpu', rows[0]['device'])}", "", head,
           "|" + "---|" * (1 + len(ranks) + len([n for n in ranks if n > 1]))]
    for b in streams:
        cells = [f"{tok[(n, b)]:,.1f}" if (n, b) in tok else "-" for n in ranks]
        base = tok.get((1, b))
        ups = [f"{tok[(n, b)] / base:.2f}x" if base and (n, b) in tok else "-" for n in ranks if n > 1]
        out.append(f"| {b} | " + " | ".join(cells + ups) + " |")
    pre = {r["ranks"]: r["prefill_tok_s"] for r in rows}
    load = {r["ranks"]: r["load_s"] for r in rows}
    out.append(f"| prefill {rows[0]['prefill_tokens']} | " + " | ".join(
        f"{pre[n]:,.0f}" for n in ranks) + " | " + " | ".join(
        f"{pre[n] / pre[1]:.2f}x" if 1 in pre else "-" for n in ranks if n > 1) + " |")
    out += ["", "Load (s, rank 0): " + ", ".join(f"TP={n} {load[n]:.1f}" for n in ranks), ""]
    return out


def peer_rows(name: str, rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        dev = r.get("gpu", r["device"])
        out.append({"model": MODELS.get(name, name), "streams": r["decode_streams"], "metric": "decode tok/s",
                    "orcd": round(r["decode_tok_s"], 1), "llama_cpp": None, "device": dev, "tp": r["ranks"]})
    for n in sorted({r["ranks"] for r in rows}):
        r = next(x for x in rows if x["ranks"] == n)
        out.append({"model": MODELS.get(name, name), "streams": 1,
                    "metric": f"prefill tok/s ({r['prefill_tokens']} tokens)",
                    "orcd": round(r["prefill_tok_s"]), "llama_cpp": None,
                    "device": r.get("gpu", r["device"]), "tp": n})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, help="NAME=path/to/tp.json (repeatable)")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    runs = {k: json.loads(Path(v).read_text()) for k, v in (x.split("=", 1) for x in a.run)}
    out = Path(a.out)
    (out / f"tp_{a.tag}.json").write_text(json.dumps(
        {"command": a.command, "commit": a.commit, "runs": runs}, indent=1))
    md = [f"Tensor parallelism, `{a.command}` at commit {a.commit}", ""]
    for name, rows in runs.items():
        md += _table(name, rows)
    (out / f"tp_{a.tag}.md").write_text("\n".join(md))
    peers = [row for name, rows in runs.items() for row in peer_rows(name, rows)]
    (out / "peers_tp.json").write_text(json.dumps(peers, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
