"""peers.json rows -> peers.md (table with ratios) and peers.png (decode tok/s, orcd vs llama.cpp)."""

from __future__ import annotations

from pathlib import Path


def rows_for(model: str, orcd: dict, llama: dict, device: str, version: str) -> list[dict]:
    """orcd: orcd_side.measure() output; llama: {'bench': llama_bench(), 'batched': batched_bench()}.
    decode rows per stream count (llama.cpp: batched-bench S_TG), one prefill row (llama-bench pp512)."""
    rows = []
    for c, r in sorted(orcd.get("decode", {}).items(), key=lambda kv: int(kv[0])):
        ll = llama.get("batched", {}).get(c, {}).get("decode_tok_s")
        row = {"model": model, "streams": int(c), "metric": "decode", "orcd": r["decode_tok_s"],
               "llama_cpp": ll, "device": device, "llama_cpp_version": version}
        if c == "1" and "tg128" in llama.get("bench", {}):
            row["llama_cpp_tg128"] = llama["bench"]["tg128"]["avg_ts"]  # llama-bench, empty cache
        rows.append(row)
    if "prefill" in orcd or "pp512" in llama.get("bench", {}):
        rows.append({"model": model, "streams": 1, "metric": "prefill",
                     "orcd": orcd.get("prefill", {}).get("tok_s"),
                     "llama_cpp": llama.get("bench", {}).get("pp512", {}).get("avg_ts"),
                     "device": device, "llama_cpp_version": version})
    return rows


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# orcd vs llama.cpp ({meta.get('device', '?')}, one run)", "",
             f"llama.cpp: {meta.get('llama_cpp_version', '?')}; build {meta.get('build_s', '?')} s "
             f"in this run. Command: `{meta.get('command', '?')}`.", "",
             "| model | metric | streams | orcd tok/s | llama.cpp tok/s | orcd ÷ llama.cpp |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['orcd'] / r['llama_cpp']:.2f}×" if r["orcd"] and r["llama_cpp"] else "—"
        what = "prefill 512" if r["metric"] == "prefill" else "decode"
        lines.append(f"| {r['model']} | {what} | {r['streams']} | {_fmt(r['orcd'])} | {_fmt(r['llama_cpp'])} "
                     f"| {ratio} |")
    lines += ["", "Decode: 128-token prompts, 128 new tokens per stream, aggregate tok/s after every stream "
              "has its first token (orcd: LLMEngine.step(); llama.cpp: llama-batched-bench S_TG). Prefill: "
              "one 512-token prompt (orcd: one engine step; llama.cpp: llama-bench pp512)."]
    for note in meta.get("notes", []):
        lines.append(f"\nNote: {note}")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> str | None:
    """Bars of decode tok/s per stream count, one panel per model; returns a note if not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib missing: no peers.png"
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        dec = [r for r in rows if r["model"] == model and r["metric"] == "decode"]
        xs = range(len(dec))
        ax.bar([x - 0.2 for x in xs], [r["orcd"] or 0 for r in dec], 0.4, label="orcd")
        ax.bar([x + 0.2 for x in xs], [r["llama_cpp"] or 0 for r in dec], 0.4, label="llama.cpp")
        ax.set_xticks(list(xs), [str(r["streams"]) for r in dec])
        ax.set_xlabel("streams")
        ax.set_ylabel("decode tok/s")
        ax.set_title(model)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None
