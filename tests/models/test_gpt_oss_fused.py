"""The gpt-oss fused decode step: logits equal model.forward's (fp32, the kernels under TRITON_INTERPRET=1:
gpt_oss_fused_cases.py), and models it cannot run are refused by name at construction."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orcd.quant.kernels import triton_available

needs_interpreter = pytest.mark.skipif(
    not triton_available() or torch.cuda.is_available(),
    reason="needs triton and no CUDA (with CUDA: tests/models/test_gpt_oss_gpu.py)")


@needs_interpreter
def test_fused_step_logits_equal_model_forward() -> None:
    script = Path(__file__).with_name("gpt_oss_fused_cases.py")
    proc = subprocess.run([sys.executable, str(script)], env=dict(os.environ, TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    assert [r[0] for r in rows] == ["fused-step-b2", "fused-step-b6", "fused-step-merged-b6"]
    for name, err, tol in rows:
        assert float(err) < float(tol), name


def test_refuses_models_it_cannot_run(tmp_path) -> None:
    """A float-expert file (no split MXFP4) and a dense model are refused with a ValueError."""
    pytest.importorskip("triton")
    from test_gpt_oss import DIMS

    from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf
    from orcd.loading.loader import load_model
    from orcd.runner.fused_gpt_oss import GptOssDecoder

    path = write_gpt_oss_gguf(tmp_path / "t.gguf", seed=1, **DIMS)
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False, keep_quantized=True)
    with pytest.raises(ValueError, match="MXFP4|GEMV"):  # no interpreter: experts not split
        GptOssDecoder(loaded.model)
    with pytest.raises(ValueError, match="gpt-oss blocks"):
        GptOssDecoder(torch.nn.Linear(2, 2))


def test_decode_graphs_pick_the_fused_step_or_none(tmp_path) -> None:
    """decode_graphs.pick_step on a gpt-oss model: GptOssDecoder where its kernels apply, else None (the
    graphs replay model.forward). Never an exception: the runner turns a failed capture into eager decode
    for every step (a raise here once cost gpt-oss its CUDA graphs: 30 tok/s at 1 stream on an H100)."""
    pytest.importorskip("triton")
    from test_gpt_oss import DIMS

    from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf
    from orcd.loading.loader import load_model
    from orcd.runner.decode_graphs import pick_step

    path = write_gpt_oss_gguf(tmp_path / "t.gguf", seed=1, **DIMS)
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False, keep_quantized=True)
    assert pick_step(loaded.model) is None  # on the CPU without the interpreter the experts are not split


def test_fuse_quant_parts() -> None:
    """GptOssDecoder's fuse_quant: True / False / None (the default) / named parts; an unknown part is refused
    by name."""
    pytest.importorskip("triton")
    from orcd.runner.fused_gpt_oss import FUSE_PARTS, FUSE_QUANT_DEFAULT, quant_parts

    assert quant_parts(True) == set(FUSE_PARTS) and quant_parts(False) == set()
    assert quant_parts(None) == FUSE_QUANT_DEFAULT <= set(FUSE_PARTS)
    assert quant_parts("o,h") == {"o", "h"} and quant_parts({"act"}) == {"act"}
    with pytest.raises(ValueError, match="unknown parts \\['x'\\]"):
        quant_parts("o,x")
    # the default folds o only (act lost at 1 and 8 rows with the tuned launches); a named part applies
    assert FUSE_QUANT_DEFAULT == {"o"}
