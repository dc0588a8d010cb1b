"""`orcd synth --like tiny-gpt-oss` writes a gpt-oss file orcd loads and runs; the gpt-oss-20b preset has the
real model's tensors (459, 20.9 B parameters, ~12.1 GB as ggml-org's MXFP4 file) without writing it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quants

from orcd.cli.main import main
from orcd.gguf import open_gguf
from orcd.gguf.presets import PRESETS
from orcd.gguf.synth import _tensor_nbytes
from orcd.gguf.synth_gpt_oss import gpt_oss_qtypes, gpt_oss_shapes
from orcd.loading.loader import load_model


def preset_shapes(name: str) -> dict[str, tuple[int, ...]]:
    p = PRESETS[name]
    return gpt_oss_shapes(p["vocab_size"], p["hidden"], p["n_layers"], p["ffn"], p["n_heads"],
                          p["n_kv_heads"], p["head_dim"], p["n_experts"])


def test_gpt_oss_20b_preset_is_the_real_layout() -> None:
    shapes = preset_shapes("gpt-oss-20b")
    plan = gpt_oss_qtypes(shapes)
    assert len(shapes) == 459 and sum(int(np.prod(s)) for s in shapes.values()) == 20_914_757_184
    assert shapes["blk.0.ffn_gate_exps.weight"] == (32, 2880, 2880)
    assert shapes["blk.23.attn_q.weight"] == (4096, 2880) and shapes["blk.0.attn_sinks.weight"] == (64,)
    counts = Counter(plan.values())
    assert counts[Q.MXFP4] == 72 and counts[Q.Q8_0] == 2 + 24 * 4  # embeddings, head, attention
    assert plan["blk.5.ffn_gate_inp.weight"] == Q.F32
    assert sum(_tensor_nbytes(plan[n], s) for n, s in shapes.items()) == 12_096_558_336


def test_synth_cli_tiny_gpt_oss_loads_and_runs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "g.gguf"
    assert main(["synth", "--like", "tiny-gpt-oss", str(out)]) == 0
    assert "MXFP4 x6" in capsys.readouterr().err
    f = open_gguf(out)
    assert f.architecture == "gpt-oss" and f.metadata["general.file_type"] == 38
    for name in ("blk.1.ffn_down_exps.weight", "blk.0.attn_sinks.weight", "blk.0.ffn_up_exps.bias"):
        t = f.tensors[name]
        w = np.asarray(quants.dequantize(t.data, t.qtype), np.float32)
        assert np.isfinite(w).all() and 0.005 < w.std() < 2, name
    assert main(["inspect", str(out)]) == 0
    assert "4 experts (2 per token)" in capsys.readouterr().out
    m = load_model(out, device="cpu", dtype=torch.float32)
    assert m.cfg.n_experts == 4 and m.tokenizer.vocab_size == 1024
    ids = torch.tensor(m.tokenizer.encode_chat([{"role": "user", "content": "Hi"}]))
    assert m.tokenizer.decode(ids.tolist()).endswith("<|start|>assistant")
    assert main(["synth", "--like", "tiny-gpt-oss", "--quant", "Q9_Z", str(tmp_path / "bad.gguf")]) == 2
