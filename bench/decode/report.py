"""Markdown table and PNG bar chart for graph_vs_hf.py results."""

from __future__ import annotations

from pathlib import Path

TARGETS = {"decode d0 tok/s": 1200, "decode d4096 tok/s": 1000, "prefill 512 tok/s": 90000,
           "load to first token s": 1.0}


def _best(row: dict, prefix: str, suffix: str) -> float | None:
    vals = [v for k, v in row.items() if k.startswith(prefix) and k.endswith(suffix) and isinstance(v, float)]
    return max(vals) if vals else None


def summary(row: dict) -> dict:
    """The headline figures of one engine's row (orcd: CUDA-graph decode, warm Triton cache)."""
    g = row.get
    return {
        "decode d0 tok/s": _best(row, "decode_", "_d0_tok_s"),
        "decode d4096 tok/s": _best(row, "decode_", "_d4096_tok_s"),
        "prefill 512 tok/s": _best(row, "prefill_", "_512_tok_s"),
        "load to first token s": g("load_to_first_token_s_warm"),
        "weights MiB": g("weights_MiB"),
        "peak device MiB": g("peak_device_MiB"),
    }


def write_markdown(result: dict, path: Path) -> None:
    rows = result["rows"]
    lines = [f"Device: {result['device']}, torch {result['torch']}", "",
             "| metric | " + " | ".join(r["engine"] for r in rows) + " | target |",
             "|---" * (len(rows) + 2) + "|"]
    sums = [summary(r) for r in rows]
    for key in sums[0]:
        vals = " | ".join("-" if s[key] is None else f"{s[key]:,.3g}" if s[key] < 10 else f"{s[key]:,.0f}"
                          for s in sums)
        lines.append(f"| {key} | {vals} | {TARGETS.get(key, '')} |")
    lines += ["", "All figures:", ""]
    for r in rows:
        lines.append(f"- {r['engine']}: " + ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items() if k != "engine"))
    path.write_text("\n".join(lines) + "\n")


def write_plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = ["decode d0 tok/s", "decode d4096 tok/s", "prefill 512 tok/s"]
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 3.5))
    for ax, key in zip(axes, keys, strict=True):
        names = [r["engine"].split(" (")[0] for r in result["rows"]]
        vals = [summary(r)[key] or 0 for r in result["rows"]]
        ax.bar(names, vals, color=["tab:blue", "tab:gray"][: len(vals)])
        ax.axhline(TARGETS[key], color="tab:red", linestyle="--", label="target")
        ax.set_title(key)
        ax.legend()
    fig.suptitle(f"Qwen2.5-0.5B-shaped, {result['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
