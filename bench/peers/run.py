"""The peer harness: orcd and llama.cpp on the same synthesized files, one machine, one run.

usage (on the GPU machine, from the repository root, gguf importable):
    python bench/peers/run.py --out $OUT [--models 0.5b,7b] [--streams 1,8,32,64] [--products]

1. starts building llama-bench + llama-batched-bench from SRC_TAR (llama_side.py; timed, niced);
2. meanwhile writes `orcd synth --like qwen2.5-7b|qwen2.5-0.5b --quant Q4_K_M` files and, with
   --products, times every 7B product's kernels on the otherwise idle GPU (products.py);
3. after the build: llama.cpp's decode (batched-bench) and prefill (llama-bench) on each file, then
   orcd's (orcd_side.py, one process per file, after the build so the compiler does not share the CPU);
4. writes OUT/peers.json (rows {model, streams, metric, orcd, llama_cpp, device, llama_cpp_version}),
   OUT/peers.md and OUT/peers.png. Every stage has a time limit; what finished is always written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama_side  # noqa: E402
import report  # noqa: E402

# --models NAME -> `orcd synth --like` preset (tiny: CPU smoke test). gemma3-270m: the real Gemma 3 270M
# file's shapes and per-tensor types exactly (Q8_0 tied head, Q5_0 / Q4_K / Q6_K), random weights
LIKE = {"0.5b": "qwen2.5-0.5b", "7b": "qwen2.5-7b", "gpt-oss-20b": "gpt-oss-20b",
        "gemma3-270m": "gemma3-270m", "tiny": "tiny-qwen2-256"}
QUANT = {"gpt-oss-20b": "MXFP4"}  # synth quant per model where Q4_K_M is not what llama.cpp users run


def stage(name: str, fn, notes: list[str]):
    """fn() or None; a failure becomes a note (the other stages still run)."""
    t0 = time.perf_counter()
    try:
        out = fn()
        print(f"[{name}] done in {time.perf_counter() - t0:.0f} s", flush=True)
        return out
    except Exception as err:  # noqa: BLE001 - one failed stage is recorded, the rest still run
        notes.append(f"{name} failed: {type(err).__name__}: {str(err)[:400]}")
        print(f"[{name}] FAILED: {err}", flush=True)
        return None


def py(args: list[str], timeout: float) -> bool:
    subprocess.run([sys.executable, *args], check=True, timeout=max(1.0, timeout))
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="0.5b,7b", help="synthesized, comma-separated: " + ",".join(LIKE))
    ap.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                    help="also a real GGUF already on the machine (e.g. gemma3-270m=/tmp/g.gguf)")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--work", default="/tmp/peers",
                    help="build + synth files; kept and reused by later calls on the same warm machine")
    ap.add_argument("--products", action="store_true", help="also time the 7B products during the build")
    ap.add_argument("--products-args", default="", help="extra arguments for products.py")
    ap.add_argument("--during", default="",
                    help="a shell command run after the products, during the build, at the lowest CPU "
                         "priority (nice 19: session 28's GPU tests beside the build on 16 cores pushed it "
                         "from 258 s past its 300 s)")
    ap.add_argument("--after", default="", help="a shell command run after everything else")
    ap.add_argument("--budget", type=float, default=580.0, help="seconds for everything")
    ap.add_argument("--prepare", action="store_true",
                    help="build llama.cpp and write the synth files (and --during), then stop: a later call "
                         "on the same warm machine with the same --work measures")
    a = ap.parse_args()
    t_start = time.perf_counter()
    left = lambda: a.budget - (time.perf_counter() - t_start)  # noqa: E731
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if llama_side.built(work / "llama"):
        notes.append("llama.cpp binaries reused from an earlier call on this machine (same lease)")
    proc, t_build = llama_side.start_build(llama_side.SRC_TAR, work / "llama")
    files = {}
    models = [m for m in a.models.split(",") if m]
    for m in sorted(models, key=lambda m: m != "7b"):  # the 7B file first (products need it)
        quant = QUANT.get(m, "Q4_K_M")
        f = work / f"{LIKE[m]}-{quant}.gguf"
        synth = ["-m", "orcd", "synth", "--like", LIKE[m], "--quant", quant, str(f)]
        if f.is_file() or stage(f"synth {m}", lambda synth=synth: py(synth, 120), notes) is not None:
            files[m] = str(f)  # a file from an earlier call on the same machine is reused
    for spec in a.file:
        name, _, path = spec.partition("=")
        files[name] = path
    if a.products:
        stage("products", lambda: py([str(HERE / "products.py"), str(out / "products.json"),
                                      *a.products_args.split()], min(240, left() - 350)), notes)
    if a.during:
        stage("during", lambda: subprocess.run(["nice", "-n", "19", "sh", "-c", a.during],
                                               timeout=max(1.0, left() - 210)), notes)
    try:
        rc = proc.wait(timeout=max(1.0, left() - 200))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    build_s = time.perf_counter() - t_build
    if rc != 0:
        notes.append(f"llama.cpp build {rc} after {build_s:.0f} s: " +
                     (work / "llama/build.log").read_text()[-600:])
    print(f"[build] rc {rc} in {build_s:.0f} s", flush=True)
    if a.prepare:
        print("[prepare] files: " + ", ".join(files.values()), flush=True)
        return 0 if rc == 0 else 1
    bins = work / "llama/build/bin"
    llama: dict = {m: {} for m in files}
    for m, f in files.items():
        if rc == 0:
            llama[m]["bench"] = stage(f"llama-bench {m}", lambda f=f: llama_side.llama_bench(bins, f),
                                      notes) or {}
            llama[m]["batched"] = stage(f"llama-batched-bench {m}", lambda f=f: llama_side.batched_bench(
                bins, f, [int(s) for s in a.streams.split(",")]), notes) or {}
    orcd: dict = {}
    for m, f in files.items():
        js = work / f"orcd_{m}.json"
        if stage(f"orcd {m}", lambda f=f, js=js: py([str(HERE / "orcd_side.py"), f, str(js), "--streams",
                                                     a.streams], left() - 10), notes) is not None:
            orcd[m] = json.loads(js.read_text())
    write(out, files, orcd, llama, notes, build_s, rc)
    if a.after and left() > 20:
        stage("after", lambda: subprocess.run(a.after, shell=True, timeout=max(1.0, left() - 5)), notes)
    return 0


def write(out: Path, files: dict, orcd: dict, llama: dict, notes: list[str], build_s: float, rc) -> None:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    rows = []
    for m in files:
        rows += report.rows_for(m.upper(), orcd.get(m, {}), llama.get(m, {}), device, llama_side.VERSION)
    meta = {"device": device, "llama_cpp_version": llama_side.VERSION, "build_s": round(build_s),
            "build_rc": rc, "command": " ".join(["python", *sys.argv]), "notes": notes,
            "llama_build": next((v["bench"].get("build") for v in llama.values() if v.get("bench")), None)}
    (out / "peers.json").write_text(json.dumps(rows, indent=1))
    (out / "peers_raw.json").write_text(json.dumps({"meta": meta, "orcd": orcd, "llama": llama}, indent=1))
    (out / "peers.md").write_text(report.markdown(rows, meta))
    note = report.plot(rows, out / "peers.png")
    print((out / "peers.md").read_text() + (note or ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
