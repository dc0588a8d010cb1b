"""A/B of the int8 Q4_K GEMVs between two orcd source trees (issue 16: q4k_head.py's one 16-byte head load
per block against the byte loads before it), on the 7B Q4_K shapes at 1 row (--rows: more).

usage: python bench/kernels/q4k_head_ab.py --before DIR --after DIR [DIR ...] --out bench/results/NAME.json
       [--rounds 3] [--rows 1]
       TRITON_INTERPRET=1 python bench/kernels/q4k_head_ab.py --before DIR --after DIR --out X.json --dry
       python bench/kernels/q4k_head_ab.py --before DIR --after DIR [DIR ...] --ptx [--rows 8]   (no GPU)

Each tree runs in its own worker process (PYTHONPATH=DIR first, so `orcd` is that tree's), started once:
it builds the same random weights (same seeds), checks its outputs into a file, then times each product
when asked. Products: gemv_i8 q/o 3584x3584 and down 3584x18944 (Q4_K), glu_q4k_i8 gate+up 2x18944x3584
(quant_out off: the kernel alone), gemv3_i8 q/k/v 3584+512+512 x 3584 (Q4_K, Q4_K, Q6_K v). Time: one
CUDA graph of back-to-back launches over >= 200 MB of weight copies (bench/peers/products.py's
graph_time, blocks, copies_for), median of 7 replays; each round times the trees in turn (before, after,
...) and the table gives each tree's median over rounds, its ratio to before's, TB/s = weight bytes /
time, and whether its outputs are bit-identical to before's. Several --after trees (after1, after2, ...)
measure steps separately. Writes OUT (.json) and OUT with .md; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (name, kind, out, in); kind: gemv (Q4_K), glu (gate + up Q4_K), qkv (q Q4_K [out, in]; k Q4_K and v
# Q6_K [out / 7, in]: the 7B's 512 of 3584)
SHAPES = [("q/o 3584x3584", "gemv", 3584, 3584), ("down 3584x18944", "gemv", 3584, 18944),
          ("gate+up 2x18944x3584", "glu", 18944, 3584), ("qkv 4608x3584", "qkv", 3584, 3584)]
DRY = [("q/o 40x512", "gemv", 40, 512), ("down 16x1024", "gemv", 16, 1024),
       ("gate+up 2x64x512", "glu", 64, 512), ("qkv 72x512", "qkv", 56, 512)]


def weight_bytes(kind: str, n: int, k: int) -> int:
    """Bytes of the product's weights (Q4_K 144 per 256, Q6_K 210 per 256)."""
    q4 = {"gemv": n, "glu": 2 * n, "qkv": n + n // 7}[kind] * k // 256 * 144
    return q4 + (n // 7 * k // 256 * 210 if kind == "qkv" else 0)


def _products(shapes, rows: int, dev: str) -> list[tuple[str, int, list, object]]:
    """(name, weight bytes, [call per weight copy], first copy's call) for each shape at `rows` rows."""
    import torch
    from gguf import GGMLQuantizationType as Q
    from products import blocks, copies_for

    from orcd.quant.kernels.gemv3_int8 import gemv3_i8
    from orcd.quant.kernels.gemv_int8 import gemv_i8, glu_q4k_i8
    from orcd.quant.kernels.xquant import quantize_x

    out = []
    for i, (name, kind, n, k) in enumerate(shapes):
        torch.manual_seed(i)
        xq, xs = quantize_x(torch.randn(rows, k, device=dev, dtype=torch.bfloat16))
        nbytes = weight_bytes(kind, n, k)
        copies = copies_for(nbytes) if dev == "cuda" else 1  # the CPU dry run: one copy
        if kind == "gemv":
            ws = [blocks(Q.Q4_K, n, k, 10 * i + c) for c in range(copies)]
            fns = [partial(gemv_i8, xq, xs, w, n, k, int(Q.Q4_K)) for w in ws]
        elif kind == "glu":
            ws = [(blocks(Q.Q4_K, n, k, 10 * i + c), blocks(Q.Q4_K, n, k, 10 * i + 5 + c))
                  for c in range(copies)]
            fns = [partial(glu_q4k_i8, xq, xs, g, u, n, k, quant_out=False) for g, u in ws]
        else:
            ws = [[(blocks(qt, o, k, 10 * i + 3 * c + j), o, qt, None) for j, (qt, o) in
                   enumerate(((Q.Q4_K, n), (Q.Q4_K, n // 7), (Q.Q6_K, n // 7)))] for c in range(copies)]
            fns = [partial(gemv3_i8, xq, xs, w, k, torch.bfloat16) for w in ws]
        out.append((name, nbytes, fns, fns[0]))
    return out


def worker(tree: str, shapes, rows: int, outputs: str) -> None:
    """One tree: outputs of each product's first copy to `outputs` (torch.save), `ready` on stdout, then
    one JSON line of {name: seconds} per `time` line read from stdin."""
    import torch

    sys.path[:0] = [str(ROOT / "bench/peers")]
    from products import DEV, graph_time

    import orcd

    assert Path(orcd.__file__).resolve().is_relative_to(Path(tree).resolve()), orcd.__file__
    prods = _products(shapes, rows, DEV)
    with torch.inference_mode():
        outs = {}
        for name, _, _, first in prods:
            y = first()
            outs[name] = [t.cpu() for t in (y if isinstance(y, (list, tuple)) else [y]) if t is not None]
        torch.save(outs, outputs)
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "time":
                break
            print(json.dumps({name: graph_time(fns) for name, _, fns, _ in prods}), flush=True)


def ptx_worker(rows: int) -> None:
    """This tree, on the CPU: the products' kernels compiled for sm_90 (tests/kernels_compile/sm90.py), one
    JSON line per kernel: registers, local (spill) bytes, ld.global by width, bar.sync, shfl, SASS lines."""
    import re
    from collections import Counter

    import torch
    import triton
    from triton.runtime.jit import JITFunction

    sys.path[:0] = [str(ROOT / "bench/peers"), str(ROOT / "tests/kernels_compile")]
    from sm90 import Record, compile_only

    tools, got, rec = Path(triton.__file__).parent / "backends/nvidia/bin", [], Record()
    with compile_only(rec), torch.inference_mode():
        inner = JITFunction.run

        def run(self, *args, **kwargs):
            got.append((self.fn.__name__, inner(self, *args, **kwargs)))
            return got[-1][1]

        JITFunction.run = run
        for _, _, _, first in _products(SHAPES, rows, "cpu"):
            first()
    assert not rec.failures, rec.failures
    cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"q4k_head_ab_{os.getpid()}.cubin"
    for name, k in dict((id(k), (n, k)) for n, k in got if k is not None and "i8" in n).values():
        ptx = k.asm["ptx"]
        cubin.write_bytes(k.asm["cubin"])
        res, sass = (subprocess.run([tools / "cuobjdump", flag, cubin], capture_output=True, text=True).stdout
                     for flag in ("-res-usage", "-sass"))
        cubin.unlink()
        print(json.dumps({"kernel": name, "regs": int(re.search(r"REG:(\d+)", res).group(1)),
                          "local_bytes": int(re.search(r"LOCAL:(\d+)", res).group(1)),
                          "ld_global": dict(sorted(Counter(re.findall(r"\bld\.global\.(\S+)", ptx)).items())),
                          "bar_sync": ptx.count("bar.sync"), "shfl": ptx.count("shfl."),
                          "sass": len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/", sass, re.M))}), flush=True)


def ptx_compare(a) -> None:
    """--ptx: ptx_worker in each tree (PYTHONPATH=DIR first), a table of its kernels."""
    lines = [f"# int8 GEMV kernels for sm_90 by source tree ({a.rows} row(s); compiled on the CPU)", "",
             "| tree | kernel | regs | local B | ld.global | bar.sync | shfl | SASS |",
             "|---|---|---|---|---|---|---|---|"]
    for t, d in _trees(a).items():
        path = os.pathsep.join([str(Path(d).resolve()), os.environ.get("PYTHONPATH", "")])
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": path}
        out = subprocess.run([sys.executable, __file__, "--ptx-worker", "--rows", str(a.rows)], env=env,
                             capture_output=True, text=True, check=True).stdout
        for r in map(json.loads, out.splitlines()):
            lds = " ".join(f"{w}:{c}" for w, c in r["ld_global"].items())
            lines.append(f"| {t} | {r['kernel']} | {r['regs']} | {r['local_bytes']} | {lds} | "
                         f"{r['bar_sync']} | {r['shfl']} | {r['sass']} |")
    print("\n".join(lines))


def _start(tree: str, a, outputs: Path) -> subprocess.Popen:
    path = os.pathsep.join([str(Path(tree).resolve()), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)  # the tree's orcd first
    cmd = [sys.executable, __file__, "--worker", tree, "--rows", str(a.rows), "--outputs", str(outputs)]
    return subprocess.Popen(cmd + (["--dry"] if a.dry else []), env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _ask(proc: subprocess.Popen, what: str) -> str:
    proc.stdin.write(what + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"worker exited ({proc.wait()})")
    return line


def _same(a: list, b: list) -> bool:
    import torch

    bits = [(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b, strict=True)]
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in bits)


def _trees(a) -> dict[str, str]:
    """{"before": DIR, "after": DIR} (several --after: "after1", "after2", ...), in round order."""
    names = ["after"] if len(a.after) == 1 else [f"after{i + 1}" for i in range(len(a.after))]
    return {"before": a.before, **dict(zip(names, a.after, strict=True))}


def _rounds(a, trees: dict, files: dict) -> dict[str, list[dict]]:
    """Every tree's worker started once; `rounds` rounds, each timing the trees in turn."""
    procs = {t: _start(d, a, files[t]) for t, d in trees.items()}
    try:
        for t, p in procs.items():
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{t} worker failed ({p.wait()})")
        times = {t: [] for t in procs}
        for _ in range(a.rounds):
            for t, p in procs.items():
                times[t].append(json.loads(_ask(p, "time")))
        return times
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()


def compare(a) -> dict:
    """Medians per product and tree, against the before tree's, and the outputs' bit equality with it."""
    import torch

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    trees = _trees(a)
    files = {t: out.with_name(out.stem + f".{t}.pt") for t in trees}
    times = _rounds(a, trees, files)
    outs = {t: torch.load(f) for t, f in files.items()}
    for f in files.values():
        f.unlink()
    rows = []
    for name, kind, n, k in DRY if a.dry else SHAPES:
        nbytes = weight_bytes(kind, n, k)
        base = statistics.median(r[name] for r in times["before"])
        for t in trees:
            med = statistics.median(r[name] for r in times[t])
            rows.append({"product": name, "tree": t, "bytes": nbytes, "us": med * 1e6,
                         "TBps": nbytes / med / 1e12, "vs_before": med / base,
                         "same_bits_as_before": _same(outs[t][name], outs["before"][name]),
                         "rounds_us": [r[name] * 1e6 for r in times[t]]})
    return {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (dry)",
            "trees": trees, "rows_per_product": a.rows, "rounds": a.rounds, "table": rows}


def write(res: dict, out: str) -> None:
    Path(out).write_text(json.dumps(res, indent=1))
    lines = [f"# Q4_K int8 GEMVs by source tree ({res['device']}; {res['rows_per_product']} row(s), "
             f"median of {res['rounds']} rounds, trees in turn)", ""]
    lines += [f"- {t}: {d}" for t, d in res["trees"].items()]
    lines += ["", "| product | tree | µs | TB/s | vs before | same bits as before |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['product']} | {r['tree']} | {r['us']:.1f} | {r['TBps']:.2f} | {r['vs_before']:.3f} | "
              f"{'yes' if r['same_bits_as_before'] else 'NO'} |" for r in res["table"]]
    Path(out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before")
    ap.add_argument("--after", nargs="+", help="one tree, or several (after1, after2, ...)")
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--dry", action="store_true", help="small shapes (CPU under TRITON_INTERPRET=1)")
    ap.add_argument("--ptx", action="store_true", help="no GPU: each tree's kernels compiled for sm_90, "
                    "registers and instruction counts")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ptx-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--outputs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, DRY if args.dry else SHAPES, args.rows, args.outputs)
    elif args.ptx_worker:
        ptx_worker(args.rows)
    elif args.ptx:
        ptx_compare(args)
    else:
        write(compare(args), args.out)
