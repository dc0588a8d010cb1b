"""The report of bench/structured/mask_cost.py runs: OUT/mask_cost.md (one table, every run), .json (the
runs) and .png (the mask's share of the step per streams). Earlier reports' mask_cost.json (a list of runs)
can be passed again, so new runs join the old ones."""

from __future__ import annotations

import json
from pathlib import Path

RESULT = "mask_cost"


def shares(res: dict) -> list[dict]:
    """Per (C, constrained > 0): the mask's share of the step against the free step at the same C."""
    free = {(_schema(r), r["streams"]): r["ms_per_step"] for r in res["rounds"] if r["constrained"] == 0}
    return [r | {"share": (r["ms_per_step"] - free[_schema(r), r["streams"]]) / r["ms_per_step"]}
            for r in res["rounds"] if r["constrained"] > 0]


def _schema(row: dict) -> str:
    return row.get("schema", "bounded")  # runs before --schemas existed used SCHEMA


def _path(row: dict) -> str:
    return row.get("path", "mask")  # runs before --paths existed masked every row first


def _runs(paths: list[str]) -> list[dict]:
    """The runs in these JSON files: one run each, or a list of them (an earlier report's mask_cost.json)."""
    out = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        out += data if isinstance(data, list) else [data]
    return out


def report(paths: list[str], out: Path) -> None:
    results = _runs(paths)
    first = results[0]
    lines = [f"# Structured-output mask cost in the decode step ({first['device']})", "",
             f"Model {Path(first['model']).name}, vocabulary {first['vocab']:,} "
             f"tokens, {first['steps']} greedy tokens per stream, prompts of {first['prompt_len']} tokens, "
             f"CUDA graphs {'on' if first['graphs'] else 'off'}. Schema: an object holding an array of "
             ">= 400 objects of 5 fields (string, integer, email string, enum, array of strings); bounded: "
             "maxLength 40 / 12 on the strings, an age range, maxItems 5; plain: no such bounds."
             " path: mask = every constrained row masked before sampling, check = drawn unmasked and "
             "masked only where the grammar rejects the token, auto = rows whose masks are cheap (or that "
             "were rejected last step) masked first, the rest checked. share = (ms/step - free ms/step) / "
             "ms/step; fill, "
             "check, consume (CPU wall), apply (device), masks (rows filled) and rejected (rows drawn again) "
             "are per decode step (- where the run did not record it). free rows unchanged (--check-free): "
             "a half-constrained batch's free rows equal the all-free batch's; on an all-free row, that "
             "batch run again (its prompts from the prefix cache) equals itself. Runs (code = the orcd "
             "commit's tag):",
             "", *[f"- {r['tag']} ({r['device']}): `{r['command']}`" for r in results], "",
             "| code | path | schema | streams | constrained | ms/step | tok/s | share | fill ms | masks | "
             "check ms | rejected | consume ms | apply ms | first fill ms | valid | free rows unchanged |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        free = [r for r in res["rounds"] if r["constrained"] == 0]
        for r in sorted(free + shares(res), key=_order):
            lines.append(_table_row(res["tag"], r))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{RESULT}.md").write_text("\n".join(lines) + "\n")
    (out / f"{RESULT}.json").write_text(json.dumps(results, indent=1))
    _plot(results, out / f"{RESULT}.png")


def _order(r: dict) -> tuple:
    return _schema(r), r["streams"], r["constrained"], _path(r) if r["constrained"] else ""


def _table_row(tag: str, r: dict) -> str:
    share = f"{100 * r['share']:.1f} %" if "share" in r else "-"

    def num(key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "-"

    cells = [tag, _path(r) if r["constrained"] else "-", _schema(r), r["streams"], r["constrained"],
             f"{r['ms_per_step']:.3f}", f"{r['decode_tok_s']:,.0f}", share, f"{r['fill_ms_per_step']:.3f}",
             num("masks_per_step", ".1f"), num("check_ms_per_step", ".3f"), num("rejected_per_step", ".1f"),
             f"{r['consume_ms_per_step']:.3f}", f"{r['apply_gpu_ms_per_step']:.3f}",
             f"{r['first_fill_ms']:.1f}", r["outputs_valid"], r.get("free_rows_unchanged", "-")]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _plot(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for res in results:
        lines: dict[tuple[str, bool], list[dict]] = {}
        for r in shares(res):
            lines.setdefault((_schema(r), _path(r), r["constrained"] == r["streams"]), []).append(r)
        for (schema, kind, every), rows in sorted(lines.items()):  # kind: mask / check (not `path`)
            ax.plot([r["streams"] for r in rows], [100 * r["share"] for r in rows], "-" if every else "--",
                    marker="o", label=f"{res['tag']} {kind}, {schema}: {'all' if every else 'half'} held")
    ax.axhline(10, color="tab:red", linestyle=":", label="10 % limit")
    ax.set(xlabel="streams", ylabel="mask share of step time (%)", xscale="log", title=results[0]["device"])
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
