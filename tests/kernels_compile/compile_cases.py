"""Compile orcd's GPU kernels for sm_90 on a CPU box (sm90.compile_only), through the wrappers the model
code calls. Prints `OK <group> <kernel> <shared bytes> <seconds> <constexprs>` for each new
specialization; `FAIL <group> <kernel> <constexprs>` (the error indented below) for each launch that did
not compile (the group goes on), `FAIL <group> (case)` for a case that raised; `TIME <group> <wall s>
cpu <this process's CPU s>`. Exits 1 on any FAIL.

    python tests/kernels_compile/compile_cases.py             # the CORE groups (CI runs these)
    python tests/kernels_compile/compile_cases.py --all -j 8  # CORE + EXTENDED, 8 processes
    python tests/kernels_compile/compile_cases.py attention canary_asm_typo

Groups run in a pool of spawned processes (each imports once and stays compile-only); set
TRITON_CACHE_DIR to a fresh directory to compile from scratch. Never under TRITON_INTERPRET=1."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import textwrap
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
_STATE: dict = {}


def _groups() -> tuple[dict, dict, dict]:
    """(CORE, EXTENDED, CANARIES) of the case modules; canaries must FAIL."""
    sys.path.insert(0, HERE)
    import cases_attn
    import cases_canary
    import cases_dense
    import cases_moe

    core = {**cases_dense.CORE, **cases_moe.CORE, **cases_attn.CORE}  # costliest first: the pool balances
    extended = {**cases_dense.EXTENDED, **cases_moe.EXTENDED, **cases_attn.EXTENDED}
    return core, extended, dict(cases_canary.CANARIES)


def _init() -> None:
    """Pool worker: import the cases, then stay compile-only for the process's life."""
    core, extended, canaries = _groups()  # also puts this folder on sys.path
    from sm90 import Record, compile_only

    _STATE.update(groups={**core, **extended, **canaries}, record=Record())
    _STATE["ctx"] = compile_only(_STATE["record"])
    _STATE["ctx"].__enter__()


def _run(name: str) -> tuple[bool, str]:
    """(ok, output lines) of one group."""
    import torch

    rec, lines = _STATE["record"], []
    start, fails, t0, c0 = len(rec.kernels), len(rec.failures), time.perf_counter(), time.process_time()
    try:
        with torch.inference_mode():
            _STATE["groups"][name]()
    except Exception:  # the case itself broke (not a kernel's compile)
        lines.append(f"FAIL {name} (case)\n" + textwrap.indent(traceback.format_exc(limit=6)[-3000:], "    "))
    lines += [f"FAIL {name} " + textwrap.indent(f, "    ").lstrip() for f in rec.failures[fails:]]
    ok = not lines
    lines += [f"OK {name} {k.name} {k.shared} {k.seconds:.2f} {k.constexprs}" for k in rec.kernels[start:]]
    lines.append(f"TIME {name} {time.perf_counter() - t0:.1f} cpu {time.process_time() - c0:.1f}")
    return ok, "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", help="group names (default: the CORE groups)")
    ap.add_argument("--all", action="store_true", help="CORE and EXTENDED groups")
    ap.add_argument("--canaries", action="store_true", help="also the canaries (must FAIL; CI's check)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="worker processes")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        ap.error("compiled kernels only: unset TRITON_INTERPRET")
    with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=_init) as pool:  # starts now
        core, extended, canaries = _groups()
        names = args.groups or list(core) + (list(extended) if args.all else [])
        names += list(canaries) if args.canaries else []
        unknown = set(names) - set(core) - set(extended) - set(canaries)
        if unknown:
            ap.error(f"unknown groups {sorted(unknown)}; known: {sorted({**core, **extended, **canaries})}")
        failed = 0
        for ok, text in pool.imap_unordered(_run, names):
            failed += not ok
            print(text, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
