"""`orcd bench` end to end on a tiny synthesized model (CPU; CUDA when present)."""

from __future__ import annotations

import json

import pytest

from orcd.cli.main import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from orcd.cli.synth import synth_like

    path, _ = synth_like(str(tmp_path_factory.mktemp("m") / "tiny.gguf"), "tiny-qwen2", "Q8_0")
    return str(path)


def test_bench_json(tiny, capsys):
    assert main(["bench", tiny, "--prompt", "16", "--depth", "20", "--steps", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["load_to_first_token_s"] > 0 and res["weights_MiB"] > 0
    assert res["prefill_16_tok_s"] > 0 and res["decode_d20_tok_s"] > 0
    assert res["decode_mode"] in ("eager", "fused_norm", "model")


def test_bench_bad_arguments(tiny, capsys, tmp_path):
    assert main(["bench", tiny, "--steps", "0"]) == 2
    assert "--steps must be at least 1" in capsys.readouterr().err
    assert main(["bench", str(tmp_path / "missing.gguf")]) == 2
