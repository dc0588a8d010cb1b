"""`orcd serve --tensor-parallel N --engine-process` is refused by name, before any rank starts (rank 0
runs the step loop on a thread: orcd.distributed.runtime.refuse_engine_process)."""

from __future__ import annotations

import pytest

from orcd.cli.main import main


@pytest.mark.parametrize(("flag", "env_value", "refused"), [
    ("--engine-process", None, True),
    (None, "1", True),
    ("--no-engine-process", "1", False),
    (None, None, False),
])
def test_engine_process_with_tensor_parallel(monkeypatch, capsys, tmp_path, flag, env_value, refused):
    if env_value is None:
        monkeypatch.delenv("ORCD_ENGINE_PROCESS", raising=False)
    else:
        monkeypatch.setenv("ORCD_ENGINE_PROCESS", env_value)
    missing = tmp_path / "missing.gguf"  # past the check the file is opened: a missing one ends the run
    argv = ["serve", "--tensor-parallel", "2", "--device", "cpu", "--model", str(missing)]
    argv += [flag] if flag else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert ("--engine-process" in err and "--tensor-parallel" in err) == refused, err
    assert ("missing.gguf" in err) != refused, err
