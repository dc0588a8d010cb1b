"""Hostile GGUF files (issue 8): mutated and truncated valid files load fine or fail with a one-line
OrcdError, never another exception, and never allocate far beyond what the file justifies."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from gguf_fuzz import load, mutate, write_seeds
from gguf_layout import header_fields
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CASES = 1000


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    files = write_seeds(tmp_path_factory.mktemp("seeds"))
    return {name: (data, header_fields(data)) for name, data in files.items()}


def test_seeds_load(seeds, tmp_path: Path) -> None:
    for name, (data, _) in seeds.items():
        (tmp_path / name).write_bytes(data)
        assert load(tmp_path / name) == "ok"


def test_fuzz_mutated_files(seeds, tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    @settings(max_examples=CASES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data) -> None:
        name = data.draw(st.sampled_from(sorted(seeds)))
        seed, fields = seeds[name]
        bad, _ops = mutate(seed, fields, lambda lo, hi: data.draw(st.integers(lo, hi)))
        path = tmp_path / "case.gguf"
        path.write_bytes(bad)
        result = load(path)
        outcomes[result] = outcomes.get(result, 0) + 1

    one()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert sum(outcomes.values()) >= CASES
    assert outcomes.get("GGUFError", 0) > CASES // 4, outcomes  # the mutations do reach the checks
    assert grown_mib < 256, f"peak memory grew {grown_mib:.0f} MiB over {CASES} files of ~25 KB"
