"""Every GPU Triton kernel of orcd compiled for sm_90 (an H100) on the CPU, through the wrappers the model
code calls (compile_cases.py's CORE groups, 2 processes), with the canaries that must not compile: the
interpreter (TRITON_INTERPRET=1, how the other kernel tests run) accepts code the real compiler refuses,
e.g. a loop-carried variable changing type, or an inline-PTX typo only ptxas reads."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orcd.quant.kernels import triton_available

HERE = Path(__file__).parent
ORCD = HERE.parents[1] / "orcd"


def launched_kernels() -> set[str]:
    """`module.name` of every @triton.jit function of orcd that some code of its module launches
    (`name[grid](...)`): the kernels a GPU run compiles."""
    found = set()
    for path in ORCD.rglob("*.py"):
        tree = ast.parse(path.read_text())
        jitted = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
            "jit" in ast.unparse(d) for d in f.decorator_list)}
        module = ".".join(path.relative_to(ORCD.parent).with_suffix("").parts)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in jitted):
                found.add(f"{module}.{node.func.value.id}")
    return found


@pytest.mark.skipif(not triton_available(), reason="needs triton")
def test_every_kernel_compiles_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")  # compiled from scratch, removed with tmp_path
    proc = subprocess.run([sys.executable, str(HERE / "compile_cases.py"), "--canaries", "-j", "2"], env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout
    failed = [ln.split()[1:3] for ln in out.splitlines() if ln.startswith("FAIL ")]
    assert sorted(failed) == [["canary_asm_typo", "cases_canary._asm_typo_kernel"],
                              ["canary_loop_type", "cases_canary._loop_type_kernel"]], (
        "\n".join(ln for ln in out.splitlines() if not ln.startswith("OK ")))
    assert "Loop-carried variable v has initial type" in out  # the front end's refusal
    assert "Unknown modifier '.s23'" in out  # ptxas's, on the inline PTX
    compiled = {ln.split()[2] for ln in out.splitlines() if ln.startswith("OK ")}
    launched = launched_kernels()
    assert len(launched) >= 29  # the AST scan still finds the launch sites
    assert launched <= compiled, f"no compile case launches {sorted(launched - compiled)}"
