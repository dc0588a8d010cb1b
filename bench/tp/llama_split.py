"""llama.cpp's split modes on the GPUs orcd's tensor parallelism runs on, and the joined table.

    python bench/tp/llama_split.py measure --bin DIR --file F.gguf --out llama.json [--modes layer,row,none]
        [--streams 1,8,32,64] [--prompt 16] [--gen 64] [--budget 120]
    python bench/tp/llama_split.py report --tp tp.json --llama llama.json --model NAME --out DIR \
        [--command CMD] [--commit SHA]

measure: llama-bench (pp512, tg128; flash attention, all layers on GPU, 3 repetitions) once per
`-sm` mode, then llama-batched-bench (S_TG: aggregate decode tok/s, `--prompt`-token prompts, `--gen`
new tokens per stream) per mode; `none` runs on GPU 0 alone (llama.cpp's one-GPU figure), `layer`
(whole layers per GPU, pipelined) and `row` (each matrix's rows split, like TP) on every visible GPU.
llama.json is rewritten after each run, so a cut-short stage keeps what finished.
report: tp.json (bench/tp/tp_scaling.py) + llama.json -> DIR/peers_tp.json rows {model, streams,
metric, orcd, llama_cpp, device, tp, split_mode} and DIR/peers_tp.md: orcd TP=1 beside llama.cpp
`none`, orcd TP > 1 beside `layer` and `row`; DIR/peers_tp.png (decode tok/s bars).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

GPUS_FOR = {"none": 1}  # split mode -> GPUs it uses (others: every visible one)


def _run(cmd: list[str], timeout: float) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout))
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exit {p.returncode}: {p.stderr[-1200:]}")
    return p.stdout + "\n" + p.stderr


def bench_mode(bin_dir: Path, model: str, mode: str, timeout: float) -> dict:
    """llama-bench pp512 / tg128 tok/s (mean of 3) with -sm mode."""
    out = _run([str(bin_dir / "llama-bench"), "-m", model, "-p", "512", "-n", "128", "-ngl", "99", "-fa", "1",
                "-r", "3", "-sm", mode, "-o", "json"], timeout)
    rows = json.loads(out[out.index("["): out.rindex("]") + 1])
    res = {f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}": r["avg_ts"] for r in rows}
    res["build"] = {k: rows[0].get(k) for k in ("build_commit", "gpu_info", "split_mode")}
    return res


def batched_mode(bin_dir: Path, model: str, mode: str, streams: list[int], prompt: int, gen: int,
                 timeout: float) -> dict:
    """{streams: S_TG decode tok/s} from llama-batched-bench with -sm mode."""
    ctx = max(streams) * (prompt + gen) + 256
    out = _run([str(bin_dir / "llama-batched-bench"), "-m", model, "-c", str(ctx), "-b", "2048", "-ub", "512",
                "-ngl", "99", "-fa", "on", "-sm", mode, "-npp", str(prompt), "-ntg", str(gen),
                "-npl", ",".join(map(str, streams)), "--output-format", "jsonl"], timeout)
    res = {}
    for line in out.splitlines():
        if line.startswith("{") and "speed_tg" in line:
            r = json.loads(line)
            res[str(r["pl"])] = r["speed_tg"]
    return res


def measure(a: argparse.Namespace) -> None:
    import os

    t0, res = time.perf_counter(), {"modes": {}, "errors": [], "prompt": a.prompt, "gen": a.gen}
    left = lambda: a.budget - (time.perf_counter() - t0)  # noqa: E731
    streams = [int(s) for s in a.streams.split(",")]
    out = Path(a.out)
    for kind in ("bench", "batched"):
        for mode in a.modes.split(","):
            if left() < 5:
                res["errors"].append(f"{kind} {mode}: no time left")
                continue
            if mode in GPUS_FOR:
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(GPUS_FOR[mode])))
            else:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            try:
                got = (bench_mode(a.bin, a.file, mode, left()) if kind == "bench" else
                       batched_mode(a.bin, a.file, mode, streams, a.prompt, a.gen, left()))
                res["modes"].setdefault(mode, {})[kind] = got
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as err:
                res["errors"].append(f"{kind} {mode}: {type(err).__name__}: {str(err)[-400:]}")
            print(f"[llama {kind} -sm {mode}] {res['modes'].get(mode, {}).get(kind)}", flush=True)
            out.write_text(json.dumps(res, indent=1))


def join(tp_rows: list[dict], llama: dict, model: str) -> list[dict]:
    """orcd TP=1 rows beside llama.cpp `none`, TP > 1 beside `layer` and `row` across the same GPUs (the
    run's TP = its GPU count; None where not measured)."""
    modes = llama.get("modes", {})

    def pairs(tp: int) -> list[str]:
        return ["none"] if tp == 1 else ["layer", "row"]

    rows = []
    for r in tp_rows:
        tp, dev = r["ranks"], r.get("gpu", r["device"])
        for sm in pairs(tp):
            m = modes.get(sm, {})
            rows.append({"model": model, "streams": r["decode_streams"], "metric": "decode tok/s",
                         "orcd": round(r["decode_tok_s"], 1), "llama_cpp": m.get("batched", {}).get(
                             str(r["decode_streams"])), "device": dev, "tp": tp, "split_mode": sm})
    for tp in sorted({r["ranks"] for r in tp_rows}):
        r = next(x for x in tp_rows if x["ranks"] == tp)
        n = r["prefill_tokens"]
        for sm in pairs(tp):
            ll = modes.get(sm, {}).get("bench", {}).get(f"pp{n}")
            rows.append({"model": model, "streams": 1, "metric": f"prefill tok/s ({n} tokens)",
                         "orcd": round(r["prefill_tok_s"]), "llama_cpp": ll,
                         "device": r.get("gpu", r["device"]), "tp": tp, "split_mode": sm})
    return rows


def markdown(rows: list[dict], llama: dict, command: str, commit: str) -> str:
    lines = [f"orcd tensor parallelism vs llama.cpp split modes, `{command}` at commit {commit}", "",
             "| model | metric | streams | TP | orcd tok/s | llama.cpp -sm | llama.cpp tok/s | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ll = r["llama_cpp"]
        ratio = f"{r['orcd'] / ll:.2f}×" if ll else "—"
        lines.append(f"| {r['model']} | {r['metric']} | {r['streams']} | {r['tp']} | {r['orcd']:,} | "
                     f"{r['split_mode']} | {f'{ll:,.1f}' if ll else '—'} | {ratio} |")
    tg = {m: v.get("bench", {}).get("tg128") for m, v in llama.get("modes", {}).items()}
    lines += ["", "llama-bench tg128 (1 stream, empty cache): " + ", ".join(
        f"-sm {m} {v:,.1f}" for m, v in tg.items() if v), "",
        f"Decode: {llama.get('prompt')}-token prompts, then tok/s over the next tokens of every stream (orcd:"
        " "
        "tp_scaling.py through the leader engine, decode graphs; llama.cpp: llama-batched-bench S_TG, "
        f"{llama.get('gen')} tokens). Prefill: one 512-token prompt (llama-bench pp512). `none` = one GPU."]
    lines += [f"\nNote: {e}" for e in llama.get("errors", [])]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Decode tok/s by stream count, one panel per model: orcd per TP, llama.cpp per split mode (bars;
    none where missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    dec = [r for r in rows if r["metric"] == "decode tok/s"]
    models = list(dict.fromkeys(r["model"] for r in dec))
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        _panel(ax, [r for r in dec if r["model"] == model])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _panel(ax, dec: list[dict]) -> None:
    streams = sorted({r["streams"] for r in dec})
    series: dict[str, dict[int, float]] = {}
    for r in dec:
        series.setdefault(f"orcd TP={r['tp']}", {})[r["streams"]] = r["orcd"]
        if r["llama_cpp"]:
            series.setdefault(f"llama.cpp -sm {r['split_mode']}", {})[r["streams"]] = r["llama_cpp"]
    width = 0.8 / max(1, len(series))
    for i, (name, vals) in enumerate(series.items()):
        xs = [j + i * width for j in range(len(streams))]
        ax.bar(xs, [vals.get(s, 0) for s in streams], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(streams))], [str(s) for s in streams])
    ax.set_xlabel("streams")
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"{dec[0]['model']}, {dec[0]['device']}", fontsize=9)
    ax.legend(fontsize=8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--bin", type=Path, required=True)
    m.add_argument("--file", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--modes", default="layer,row,none")
    m.add_argument("--streams", default="1,8,32,64")
    m.add_argument("--prompt", type=int, default=16)
    m.add_argument("--gen", type=int, default=64)
    m.add_argument("--budget", type=float, default=120.0)
    r = sub.add_parser("report")
    r.add_argument("--tp", required=True)
    r.add_argument("--llama", required=True)
    r.add_argument("--model", default="qwen2.5-7b (synth, Q4_K_M)")
    r.add_argument("--out", required=True)
    r.add_argument("--command", default="bash bench/tp/tp_peers_device_run.sh")
    r.add_argument("--commit", default="?")
    a = ap.parse_args()
    if a.cmd == "measure":
        measure(a)
        return 0
    llama = json.loads(Path(a.llama).read_text()) if Path(a.llama).is_file() else {}
    rows = join(json.loads(Path(a.tp).read_text()), llama, a.model)
    out = Path(a.out)
    (out / "peers_tp.json").write_text(json.dumps(rows, indent=1))
    (out / "peers_tp.md").write_text(markdown(rows, llama, a.command, a.commit))
    plot(rows, out / "peers_tp.png")
    print((out / "peers_tp.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
