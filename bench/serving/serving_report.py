"""serving.md (tables) and serving.png (HTTP / engine per stream count) from serving.json."""

from __future__ import annotations

from pathlib import Path

TARGET = 0.85  # HTTP tok/s over engine tok/s, at every stream count (issue 19)
FIXED = [("tag", "tag"), ("model", "model"), ("route", "route"), ("streams", "C"),
         ("engine_tok_s", "engine tok/s"), ("http_tok_s", "HTTP tok/s"), ("http_over_engine", "HTTP/engine"),
         ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"), ("itl_p50_ms", "ITL p50 ms"),
         ("itl_p99_ms", "ITL p99 ms"), ("client_busy", "client busy")]
MIXED = [("tag", "tag"), ("model", "model"), ("route", "route"), ("side", "side"), ("load", "load"),
         ("rate_req_s", "req/s offered"), ("requests", "requests"), ("req_s", "req/s done"),
         ("output_tok_s", "output tok/s"), ("goodput_req_s", "goodput req/s"), ("ttft_p50_ms", "TTFT p50 ms"),
         ("ttft_p99_ms", "TTFT p99 ms"), ("tpot_mean_ms", "TPOT mean ms"), ("itl_p99_ms", "ITL p99 ms"),
         ("n_errors", "errors")]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|---" * len(cols) + "|"]
    return lines + ["| " + " | ".join(_cell(r.get(k)) for k, _ in cols) + " |" for r in rows]


def write_markdown(result: dict, path: Path) -> None:
    lines = ["# Serving: engine alone vs HTTP (`orcd serve`)", ""]
    measured = {(r["tag"], r["model"]) for r in result.get("rows", []) + result.get("mixed", [])}
    for run in result.get("runs", []):
        lines.append(f"- {run['tag']} / {run['model']}: {run['device']}, commit {run['commit']}, "
                     f"`{run['command']}`; server `{' '.join(run['serve_args'])}`"
                     + (f"; ERROR {run['error'][:200]}" if run.get("error") else "")
                     + ("" if (run["tag"], run["model"]) in measured else "; no rows (time guard)"))
    lines += ["", "## Fixed concurrency", "",
              f"Every stream sent at once; prompt ~{_first(result, 'prompt_len')} tokens, "
              f"{_first(result, 'gen_len')} new tokens, greedy, EOS ignored. *engine*: `LLMEngine.step()` "
              "alone in the benchmark's process on the same requests (the ids the server prefills, chat "
              "template included), all tokens / (first add to last token). *HTTP*: tokens the server "
              "counted (`end` event / `usage`) / (first request sent to last byte). Each repeat runs the "
              "engine round, then the HTTP round; the tok/s columns are medians of the repeats, HTTP/engine "
              "the median of the repeats' paired ratios. TTFT: send to first token event; "
              "ITL: gaps between token events as the client read them. *client busy*: the largest CPU "
              f"share of a client process (well under 1: not the limit). Target HTTP/engine >= {TARGET}.", ""]
    lines += table(result.get("rows", []), FIXED)
    if result.get("mixed"):
        lines += ["", "## Mixed load", "",
                  "Poisson arrivals for the stated span; prompt and output lengths log-normal (sigma 0.8), "
                  "clipped. *load*: offered output tokens as a fraction of the engine's 64-stream rate. "
                  "*side*: the engine alone (this process, requests added at their arrival times) or HTTP, "
                  "the same requests, one after the other. "
                  "Goodput: requests/s with TTFT and TPOT within the SLOs of the run "
                  "(`--slo-ttft-ms`, `--slo-tpot-ms`, default 1000 and 50).", ""]
        lines += table(result["mixed"], MIXED)
    path.write_text("\n".join(lines) + "\n")


def _first(result: dict, key: str):
    return next((r.get(key) for r in result.get("runs", []) if r.get(key) is not None), "-")


def write_plot(result: dict, path: Path) -> str | None:
    """HTTP/engine vs streams, one line per (tag, model, route) of the latest command's runs. A note
    instead when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot written"
    runs = result.get("runs", [])
    latest = {r["tag"] for r in runs if r.get("command") == runs[-1].get("command")} if runs else set()
    lines: dict[tuple, list] = {}
    for r in result.get("rows", []):
        if r.get("http_over_engine") and (not latest or r["tag"] in latest):  # the latest command's rows
            key = (r["tag"], r["model"], r["route"])
            lines.setdefault(key, []).append((r["streams"], r["http_over_engine"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (tag, model, route), pts in sorted(lines.items()):
        style = "o-" if route == "generate" else "s--"
        ax.plot(*zip(*sorted(pts), strict=True), style, label=f"{model} {route} ({tag})")
    ax.axhline(TARGET, linestyle="--", color="tab:red", linewidth=0.8, label=f"target {TARGET}")
    ax.set(xscale="log", xlabel="concurrent streams", ylabel="HTTP tok/s / engine tok/s", ylim=(0, 1.2),
           title="orcd serve vs the engine alone")
    streams = sorted({r["streams"] for r in result.get("rows", [])})
    if streams:
        ax.set_xticks(streams, [str(c) for c in streams])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
