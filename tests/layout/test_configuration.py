"""Configuration is passed down explicitly: no module-level switch that code flips at run time, and
environment variables read in one place (orcd/env.py). Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV_MODULE = REPO / "orcd" / "env.py"


def sources(*folders: str) -> list[tuple[Path, ast.Module]]:
    paths = [p for f in folders for p in sorted((REPO / f).rglob("*.py"))]
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in paths]


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and _is_os(node.value)


def _is_os(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "os"


def environment_reads(tree: ast.Module) -> list[int]:
    """Lines that read the environment: os.environ.get/[...]/in, os.getenv."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            f = n.func
            if (f.attr == "get" and _is_os_environ(f.value)) or (f.attr == "getenv" and _is_os(f.value)):
                lines.append(n.lineno)
        elif isinstance(n, ast.Subscript) and _is_os_environ(n.value) and isinstance(n.ctx, ast.Load):
            lines.append(n.lineno)
        elif isinstance(n, ast.Compare) and any(_is_os_environ(c) for c in n.comparators):
            lines.append(n.lineno)
    return lines


def imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("orcd"):
            names |= {a.asname or a.name for a in n.names}  # `from orcd.x import module`
    return names


def test_the_environment_is_read_only_in_orcd_env():
    found = {f"{p.relative_to(REPO)}:{line}" for p, tree in sources("orcd") if p != ENV_MODULE
             for line in environment_reads(tree)}
    assert found == set(), f"read os.environ through orcd/env.py instead: {sorted(found)}"
    assert environment_reads(ast.parse(ENV_MODULE.read_text())), "the checker no longer sees env reads"


def test_no_global_statements():
    found = [f"{p.relative_to(REPO)}:{n.lineno}" for p, tree in sources("orcd")
             for n in ast.walk(tree) if isinstance(n, ast.Global)]
    assert found == []


def test_no_module_level_boxes_flipped_at_run_time():
    """`NAME = [value]` at module level, then `NAME[0] = ...` in a function: a hidden switch."""
    found = []
    for p, tree in sources("orcd"):
        module_names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, ast.Name)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                            and t.value.id in module_names and isinstance(t.slice, ast.Constant)):
                        found.append(f"{p.relative_to(REPO)}:{n.lineno} {t.value.id}")
    assert found == []


def test_nothing_rewrites_another_modules_globals():
    """`module.NAME = value` where `module` is an imported module (what benchmarks used to do)."""
    found = []
    for p, tree in sources("orcd", "bench"):
        mods = imported_modules(tree)
        for n in ast.walk(tree):
            targets = n.targets if isinstance(n, ast.Assign) else []
            targets = [n.target] if isinstance(n, ast.AugAssign) else targets
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in mods \
                        and t.attr.isupper():
                    found.append(f"{p.relative_to(REPO)}:{n.lineno} {t.value.id}.{t.attr}")
    assert found == []
