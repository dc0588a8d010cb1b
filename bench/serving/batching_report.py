"""Markdown table, terminal table and PNG plot for batching.py results."""

from __future__ import annotations

from pathlib import Path

TARGETS = {"engine": 20000, "http": 10000}  # tok/s at 64 streams (issue 6)
COLUMNS = [("engine decode", "engine", "decode_tok_s"), ("engine e2e", "engine", "e2e_tok_s"),
           ("HTTP", "http", "tok_s"), ("HTTP decode", "http", "decode_tok_s"), ("HF generate", "hf", "tok_s")]


def figure(result: dict, phase: str, key: str, c: int) -> float | None:
    val = result.get(phase, {}).get("rounds", {}).get(str(c), {}).get(key)
    return val if isinstance(val, (int, float)) else None


def table_rows(result: dict) -> list[list[str]]:
    """One row per concurrency: each column's tok/s, then engine decode / HF and HTTP / HF."""
    rows = []
    for c in result["concurrency"]:
        vals = [figure(result, phase, key, c) for _, phase, key in COLUMNS]
        hf = figure(result, "hf", "tok_s", c)
        ratios = [v / hf if v and hf else None for v in (vals[0], vals[2])]
        rows.append([str(c)] + [_fmt(v) for v in vals] + [_fmt(r, "x") for r in ratios])
    return rows


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}{unit}" if unit else f"{v:,.0f}"


HEADER = ["C"] + [name for name, _, _ in COLUMNS] + ["engine/HF", "HTTP/HF"]


def write_markdown(result: dict, path: Path) -> None:
    e, h, f = (result.get(k, {}) for k in ("engine", "http", "hf"))
    lines = [
        f"# Continuous batching: aggregate tokens/s ({result['model_shape']})", "",
        f"Device: {result['device']}; torch {result['torch']}; transformers {f.get('transformers', '-')}; "
        f"commit {result['commit']}; {result['prompt_len']}-token prompts, {result['gen_len']} new tokens "
        "per request, greedy, EOS ignored. Command: `" + result["command"] + "`", "",
        "| " + " | ".join(HEADER) + " |", "|---" * len(HEADER) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    lines += [
        "", f"Targets at 64 streams: engine >= {TARGETS['engine']:,} tok/s, "
        f"HTTP >= {TARGETS['http']:,} tok/s.",
        "", "How measured:", "",
        "- *engine decode*: `LLMEngine.step()` in this process; tokens that arrive after every request "
        "has its first token, over the time from that step to the last one (prefill, and decodes that "
        "overlap other requests' prefill chunks, are excluded). *engine e2e*: all generated tokens / "
        "wall time from adding the requests to the last token.",
        "- *HTTP*: `orcd serve` child process, C concurrent streaming `POST /v1/generate` (httpx, one event "
        "loop); sum of `tokens_out` of the `end` events / time from sending the first request to the last "
        "`end` event. *HTTP decode*: the same split as engine decode, on token-event arrival times.",
        "- *HF generate*: `Qwen2ForCausalLM` random init, same shapes, "
        f"{f.get('dtype', '-')}, attention {f.get('attn_implementation', '-')}, one batched `generate` "
        "(min_new_tokens = max_new_tokens, do_sample=False); C x new tokens / wall time.",
        "- Each side ran one warm-up round per concurrency (short generations) before the measured rounds.",
        f"- Engine: {e.get('num_kv_blocks', '-')} KV blocks, max_num_seqs {e.get('max_num_seqs', '-')}, "
        f"token budget {e.get('max_num_batched_tokens', '-')}; weights {_fmt(e.get('weights_MiB'))} MiB, "
        f"peak device {_fmt(e.get('peak_device_MiB'))} MiB. HF peak {_fmt(f.get('peak_device_MiB'))} MiB. "
        f"Server startup {_fmt(h.get('startup_s'), ' s')}.",
        f"- Decode CUDA graphs: {_graphs(e.get('decode_graphs'))}.",
    ]
    lines += [f"- Note: {n}" for n in result.get("notes", [])]
    path.write_text("\n".join(lines) + "\n")


def _graphs(g: dict | None) -> str:
    if not g:
        return "none (eager decode)"
    kind = "fused" if g["fused"] else "model.forward"
    return f"batch sizes {g['buckets']}, {kind}, captured in {g['capture_s']:.1f} s"


def terminal_table(result: dict) -> str:
    rows = [HEADER] + table_rows(result)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows)


def write_plot(result: dict, path: Path) -> str | None:
    """Log-log tok/s vs concurrency. Returns a note when matplotlib is missing (no plot written)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot written"
    cs = result["concurrency"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, phase, key), style in zip(COLUMNS, ["o-", "o:", "s-", "s:", "^-"], strict=True):
        pts = [(c, figure(result, phase, key, c)) for c in cs]
        pts = [(c, v) for c, v in pts if v]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=name)
    for name, target in TARGETS.items():
        color = "tab:red" if name == "engine" else "tab:orange"
        ax.axhline(target, linestyle="--", linewidth=0.8, color=color, label=f"{name} target @64")
    ax.set(xscale="log", yscale="log", xlabel="concurrent streams", ylabel="aggregate tokens/s",
           title=f"{result['model_shape']}, {result['device']}")
    ax.set_xticks(cs, [str(c) for c in cs])
    ax.tick_params(axis="x", which="minor", labelbottom=False)  # log axis: label only the measured points
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
