"""--dense-batch-rows on the CPU: the dense copies themselves (torch only, no kernels), the option from the
command line to the engine, and the clear refusals. The FusedDecoder route runs under the Triton
interpreter in tests/gpu/test_dense_decode.py, and on CUDA there."""

from __future__ import annotations

import pytest
import torch

from orcd.cli.main import build_parser
from orcd.cli.synth import synth_like
from orcd.errors import OrcdError
from orcd.loading.loader import load_model
from orcd.runner.block_linears import BlockLinears
from orcd.runner.dense_weights import (
    DenseCopiesError,
    DenseWeights,
    check_dense_rows,
    check_engine_dense,
    dense_nbytes,
)


@pytest.fixture(scope="module")
def q4km(tmp_path_factory) -> str:
    """A tiny qwen2 in Q4_K_M (Q4_K and Q6_K weights, q/k/v biases, untied head)."""
    return synth_like(str(tmp_path_factory.mktemp("dense") / "m.gguf"), "tiny-qwen2-256", "Q4_K_M")[0]


@pytest.fixture(scope="module")
def loaded(q4km):
    return load_model(q4km, "cpu", tokenizer=False)


def _linears(model) -> list[BlockLinears]:
    return [BlockLinears(b.attn.q_proj, b.attn.k_proj, b.attn.v_proj, b.attn.o_proj, b.mlp.gate, b.mlp.up,
                         b.mlp.down) for b in model.blocks]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@torch.inference_mode()
def test_dense_products_equal_dequantized_model(q4km, dtype):
    """Each dense product == the dequantized model's layer (the same rounded weights, the same GEMM)."""
    quant = load_model(q4km, "cpu", dtype=dtype, keep_quantized=True, tokenizer=False).model
    full = load_model(q4km, "cpu", dtype=dtype, keep_quantized=False, tokenizer=False).model
    assert quant.blocks[0].attn.q_proj.raw is not None and quant.blocks[0].attn.q_proj.bias is not None
    lin = _linears(quant)
    dense = DenseWeights.build(lin, quant.lm_head, rows=8)
    h = torch.randn(6, quant.blocks[0].attn.q_proj.in_features, generator=torch.Generator().manual_seed(0))
    h = h.to(dtype)
    for blk, ref in zip(dense.blocks, full.blocks, strict=True):
        a = ref.attn
        for got, want in zip(blk.qkv(h), (a.q_proj(h), a.k_proj(h), a.v_proj(h)), strict=True):
            assert got.stride(1) == 1 and torch.equal(got, want)  # a column range of the q|k|v product
        assert torch.equal(blk.mlp(h), ref.mlp(h))
        x = torch.randn(6, a.o_proj.in_features).to(dtype)
        assert torch.equal(blk.o_proj(x), a.o_proj(x))
    assert torch.equal(dense.logits(h), full.compute_logits(h).float())
    # every weight copied once, 2 (bf16) or 4 (fp32) bytes each
    head = quant.lm_head
    weights = sum(m.out_features * m.in_features for b in lin for m in b.all()) + head.out_features * \
        head.in_features
    assert dense.nbytes == dense_nbytes(lin, head, dtype) == weights * dense.blocks[0].qkv_w[0].element_size()


def test_rows_threshold_and_bad_values():
    assert check_dense_rows(5) == 5 and check_dense_rows(64, max_rows=64) == 64
    for bad in (0, -1, 2.5, "8", True, None):
        with pytest.raises(DenseCopiesError, match="whole number >= 1"):
            check_dense_rows(bad)
    with pytest.raises(DenseCopiesError, match="exceeds the largest decode batch"):
        check_dense_rows(65, max_rows=64)
    with pytest.raises(DenseCopiesError, match="needs a CUDA device"):
        check_engine_dense(8, 64, torch.device("cpu"), graphs=True)
    dense = DenseWeights([], (torch.zeros(2, 2), None), rows=8, nbytes=0)
    assert not dense.takes(7) and dense.takes(8) and dense.takes(64)


@pytest.mark.parametrize("command", ["serve", "generate"])
def test_cli_option_parsed_and_refused(command, capsys):
    extra = ["hi"] if command == "generate" else []
    def parsed(*opt):
        return build_parser(command).parse_args([command, *extra, *opt]).dense_batch_rows

    assert parsed("--dense-batch-rows", "8") == 8
    assert parsed() == "auto" == parsed("--dense-batch-rows", "auto")  # the engine decides (auto_dense_rows)
    assert parsed("--dense-batch-rows", "off") is None
    for bad in ("0", "-4", "eight", "Auto"):
        with pytest.raises(SystemExit):
            build_parser(command).parse_args([command, *extra, "--dense-batch-rows", bad])
        assert "--dense-batch-rows: must be auto, off or a whole number >= 1" in capsys.readouterr().err


def test_option_reaches_the_engine_build(tmp_path):
    from orcd.cli.serve import engine_build

    args = build_parser("serve").parse_args(["serve", "--dense-batch-rows", "16"])
    assert engine_build(args, tmp_path / "m.gguf").dense_batch_rows == 16


@pytest.mark.parametrize("kw, match", [(dict(dense_batch_rows=8), "needs a CUDA device"),
                                       (dict(dense_batch_rows=65), "exceeds the largest decode batch"),
                                       (dict(dense_batch_rows=0), "whole number >= 1")])
def test_engine_refuses_clearly(loaded, kw, match):
    """On the CPU there are no decode graphs to read the copies: refused, not silently ignored."""
    from orcd.engine.llm_engine import LLMEngine

    with pytest.raises(OrcdError, match=match):
        LLMEngine(loaded, num_kv_blocks=8, max_num_seqs=64, **kw)


def test_auto_rule(loaded):
    """auto: AUTO_DENSE_ROWS when the copies take <= AUTO_DENSE_SHARE of the device's memory and decode
    graphs read them; off otherwise (no graphs, batches too small to reach the rows, no fused step, or
    the CPU, where nothing says how much memory there is)."""
    from types import SimpleNamespace

    from orcd.engine.sizing import AUTO_DENSE_ROWS, AUTO_DENSE_SHARE, auto_dense_rows
    from orcd.runner.fused_decode import dense_need

    model = loaded.model
    need = dense_need(model)
    assert need == dense_nbytes(_linears(model), model.lm_head, model.lm_head.dtype) > 0
    roomy = int(need / AUTO_DENSE_SHARE) + 1
    assert auto_dense_rows(loaded, 64, True, device_memory=roomy) == AUTO_DENSE_ROWS == 4
    assert auto_dense_rows(loaded, 64, True, device_memory=roomy - 64) is None  # copies over the share
    assert auto_dense_rows(loaded, 64, False, device_memory=roomy) is None  # eager / invariant steps
    assert auto_dense_rows(loaded, AUTO_DENSE_ROWS - 1, True, device_memory=roomy) is None
    assert auto_dense_rows(loaded, 64, True) is None  # the CPU
    assert dense_need(SimpleNamespace(fused_decode=False, cfg=SimpleNamespace(arch="gemma3"))) is None


def test_engine_without_option_reports_no_dense_bytes(loaded):
    from orcd.engine.llm_engine import LLMEngine

    eng = LLMEngine(loaded, num_kv_blocks=8)
    st = eng.stats()
    assert eng.dense is None and st["dense_weights_bytes"] == 0
    assert st["weights_bytes"] == eng.loaded.weights_bytes


@pytest.mark.parametrize("command", [["serve"], ["generate", "hi"]])
def test_refused_with_tensor_parallel(command, capsys):
    from orcd.cli.main import main

    assert main([*command, "--tensor-parallel", "2", "--dense-batch-rows", "8"]) == 2
    assert "--dense-batch-rows is for one GPU" in capsys.readouterr().err


def test_peer_bench_switch():
    """bench/peers/orcd_side.py --dense-batch-rows off,8: one engine per value, a table with the bytes."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "orcd_side", Path(__file__).resolve().parents[2] / "bench/peers/orcd_side.py")
    side = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(side)
    assert side.dense_values("off,8") == [None, 8] and side.dense_values("auto") == ["auto"]
    runs = [{"dense_batch_rows": r, "dense_rows": rr, "weights_bytes": w, "dense_weights_bytes": d,
             "device_allocated_bytes": None, "decode": {"8": {"decode_tok_s": t}},
             "prefill": {"tok_s": 100.0}}
            for r, rr, w, d, t in ((None, None, 2**30, 0, 1000.0), (8, 8, 3 * 2**30, 2 * 2**30, 1500.0),
                                   ("auto", 4, 3 * 2**30, 2 * 2**30, 1400.0))]
    lines = side.table(runs).splitlines()
    assert lines[1].split()[:3] == ["off", "1.00", "0.00"] and lines[2].split()[:3] == ["8", "3.00", "2.00"]
    assert lines[2].split()[-2] == "1,500" and lines[3].split()[0] == "auto=4"
