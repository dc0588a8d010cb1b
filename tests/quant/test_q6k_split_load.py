"""q6k_layout="split" (issue 16) where weights reach the device: load_model's option and its refusals,
apply_q6k_layout on a tiny qwen2 file with Q6_K ffn_down and output (the CPU stands in for CUDA: the
split QuantLinears' forward / dense_weight put the blocks back in GGUF order off the interpreter), the
tied embedding left alone, and the decode step's and tensor parallelism's refusals."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.loading.q6k_layout import apply_q6k_layout
from orcd.quant.linear import QuantLinear

DIMS = dict(vocab_size=320, hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("q6k")
    qt = {"default": Q.Q4_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K, "token_embd": Q.Q6_K}
    return {tied: write_model_gguf(d / f"tied{tied}.gguf", "qwen2", tied=tied, qtypes=qt, seed=3, **DIMS)
            for tied in (False, True)}


def _q6k(model) -> dict[str, QuantLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear) and m.qtype == Q.Q6_K}


@pytest.mark.parametrize("kwargs, match", [(dict(q6k_layout="packed"), "one of"),
                                           (dict(q6k_layout="split"), "CUDA"),
                                           (dict(q6k_layout="split", keep_quantized=True), "CUDA")])
def test_load_refuses(files, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_model(files[False], device="cpu", tokenizer=False, **kwargs)


def test_split_modules_compute_the_same(files):
    loaded = load_model(files[False], device="cpu", keep_quantized=True, tokenizer=False)
    mods = _q6k(loaded.model)
    assert len(mods) == 4  # ffn_down x 2, the head and the embedding's table
    before = {n: (m.raw.clone(), m.dense_weight()) for n, m in mods.items()}
    x = torch.randn(3, 512)
    ys = {n: m(x[:, :m.in_features]) for n, m in mods.items()}
    assert apply_q6k_layout(loaded.model, "split") == 3  # not the embedding's table
    for n, m in _q6k(loaded.model).items():
        kept = "embed" in n
        assert m.layout == ("gguf" if kept else "split") and ("split" in repr(m)) != kept
        assert torch.equal(m.raw, before[n][0]) == kept
        assert torch.equal(m.dense_weight(), before[n][1])
        assert torch.equal(m(x[:, :m.in_features]), ys[n])
    ids = torch.tensor([1, 5, 7])
    assert loaded.model.embed(ids).shape == (3, 256)


def test_tied_table_stays_gguf(files):
    loaded = load_model(files[True], device="cpu", keep_quantized=True, tokenizer=False)
    assert apply_q6k_layout(loaded.model, "split") == 2  # the ffn_downs; the head is the table
    assert loaded.model.lm_head.layout == "gguf"


def test_split_refused_by_readers(files):
    from orcd.distributed.layers import slice_cols, slice_rows
    from orcd.distributed.partition import TensorParallelError
    from orcd.runner.block_linears import gguf_raw
    from orcd.runner.decode_products import DecodeProducts
    from orcd.runner.fused_decode import block_linears

    loaded = load_model(files[False], device="cpu", keep_quantized=True, tokenizer=False)
    apply_q6k_layout(loaded.model, "split")
    down = loaded.model.blocks[0].mlp.down
    with pytest.raises(ValueError, match="fused_glu does not read the split"):
        gguf_raw(down, "fused_glu")
    lins = [block_linears(b) for b in loaded.model.blocks]
    DecodeProducts(int8_x=True, int8_attn=True).check_layouts(lins, loaded.model.lm_head)
    with pytest.raises(ValueError, match="int8 GEMVs"):
        DecodeProducts(int8_x=False, int8_attn=False).check_layouts(lins, loaded.model.lm_head)
    with pytest.raises(TensorParallelError, match="q6k_layout='gguf'"):
        slice_rows(down, 0, 128)
    with pytest.raises(TensorParallelError, match="q6k_layout='gguf'"):
        slice_cols(down, 0, 256, "blk.0.ffn_down.weight", True)
    with pytest.raises(ValueError, match="split"):
        QuantLinear(4, 256, Q.Q4_K, torch.float32, raw=torch.zeros(4, 144, dtype=torch.uint8), layout="split")
    with pytest.raises(ValueError, match="to_split"):
        down.to_split()


def test_engine_same_tokens(files):
    """An engine over a model with split Q6_K weights (the CPU: dense_weight's host path) generates the
    GGUF layout's greedy tokens."""
    from orcd.engine.io import EngineRequest
    from orcd.engine.llm_engine import LLMEngine
    from orcd.engine.sampling_params import SamplingParams

    outs = {}
    for layout in ("gguf", "split"):
        loaded = load_model(files[False], device="cpu", keep_quantized=True)
        apply_q6k_layout(loaded.model, layout)
        eng = LLMEngine(loaded, num_kv_blocks=32, max_num_seqs=4, enable_prefix_caching=False)
        sp = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        for i in range(2):
            eng.add_request(EngineRequest(f"r{i}", [10 + 7 * i + j for j in range(12)], sp))
        toks: dict[str, list[int]] = {"r0": [], "r1": []}
        while eng.has_work():
            for ev in eng.step():
                if ev.token_id is not None:
                    toks[ev.request_id].append(ev.token_id)
        outs[layout] = toks
    assert outs["split"] == outs["gguf"] and len(outs["gguf"]["r0"]) == 4


def _split_names(model) -> set[str]:
    return {n for n, m in _q6k(model).items() if m.layout == "split"}


def test_auto_splits_what_the_int8_step_reads(tmp_path, files, monkeypatch):
    """q6k_layout="auto" (load_model's default): off CUDA nothing moves; on a bf16 model with raw weights
    (apply_q6k_layout, the CPU standing in) the Q6_K weights the int8 decode step reads split (down after
    Q4_K gate/up, v and o with int8 attention, the untied head), and a Q6_K down after Q5_0 gate/up (the
    0.5B's fallback, read by the float fused_gemv) stays GGUF, as does everything of a float32 model."""
    loaded = load_model(files[False], device="cpu", keep_quantized=True, tokenizer=False)
    assert not _split_names(loaded.model)  # the CPU: "auto" resolves to "gguf" before the load
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the fused kernels "run" on the CPU (check_fusable)
    assert apply_q6k_layout(loaded.model, "auto") == 0  # float32: the step keeps float x, no int8 GEMVs
    bf16 = load_model(files[False], device="cpu", keep_quantized=True, tokenizer=False, dtype=torch.bfloat16)
    assert apply_q6k_layout(bf16.model, "auto") == 3
    assert _split_names(bf16.model) == {"blocks.0.mlp.down", "blocks.1.mlp.down", "lm_head"}
    qt = {"default": Q.Q4_K, "ffn_gate": Q.Q5_0, "ffn_up": Q.Q5_0, "ffn_down": Q.Q6_K, "attn_v": Q.Q6_K,
          "output": Q.Q8_0, "token_embd": Q.Q8_0}
    mixed = write_model_gguf(tmp_path / "mixed.gguf", "qwen2", qtypes=qt, seed=4, **DIMS)
    m = load_model(mixed, device="cpu", keep_quantized=True, tokenizer=False, dtype=torch.bfloat16).model
    assert apply_q6k_layout(m, "auto") == 2
    assert _split_names(m) == {"blocks.0.attn.v_proj", "blocks.1.attn.v_proj"}
    from orcd.runner.decode_products import DecodeProducts
    from orcd.runner.fused_decode import block_linears

    DecodeProducts(int8_x=True, int8_attn=True).check_layouts([block_linears(b) for b in m.blocks], m.lm_head)


@pytest.mark.parametrize("arch", ["qwen2", "llama", "phi3", "qwen3", "gemma3"])
def test_auto_on_every_architecture(tmp_path, monkeypatch, arch):
    """q6k_layout="auto" never refuses a model: blocks the fused step does not run (qwen3's and gemma3's
    QK-norm) keep every weight GGUF; the qwen2/llama/phi3 block splits its downs after Q4_K
    gate/up and the untied Q6_K head."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    qt = {"default": Q.Q4_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K, "token_embd": Q.Q8_0}
    path = write_model_gguf(tmp_path / f"{arch}.gguf", arch, tied=False, qtypes=qt, seed=6, **DIMS)
    m = load_model(path, device="cpu", keep_quantized=True, tokenizer=False, dtype=torch.bfloat16).model
    n = apply_q6k_layout(m, "auto")
    assert n == (3 if arch in ("qwen2", "llama", "phi3") else 0), (arch, _split_names(m))


def test_cli_option(tmp_path, capsys):
    """`orcd serve/generate --q6k-layout` reaches load_model; split on the CPU is one line, exit 2."""
    from orcd.cli.main import build_parser, main
    from orcd.cli.serve import engine_build

    parser = build_parser("serve")
    assert parser.parse_args(["serve"]).q6k_layout == "auto"
    build = engine_build(parser.parse_args(["serve", "--q6k-layout", "gguf"]), tmp_path / "m.gguf")
    assert build.q6k_layout == "gguf"
    assert main(["generate", "--device", "cpu", "--q6k-layout", "split", "--max-tokens", "2", "hi"]) == 2
    assert "error: q6k_layout='split' is for CUDA" in capsys.readouterr().err
    for command in ("generate", "serve"):
        argv = [command, "--device", "cpu", "--tensor-parallel", "2", "--q6k-layout", "split"]
        assert main(argv + (["hi"] if command == "generate" else [])) == 2
        assert "--q6k-layout split is for one GPU" in capsys.readouterr().err
