"""FusedDecoder(dense_rows=R): decode batches of >= R rows on dense copies of the weights (cuBLAS), the
rest on the quantized kernels. On the CPU under the Triton interpreter (interp_dense_step.py, float32);
on CUDA in bf16 against the quantized route, eagerly and captured in decode graphs."""

from __future__ import annotations

import pytest
import torch
from interp_run import interpreter_only, run_under_interpreter

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@interpreter_only
def test_dense_route_under_interpreter():
    lines = run_under_interpreter("interp_dense_step.py", timeout=300)
    names = [ln[0] for ln in lines]
    assert names == ["dense_vs_quantized", "tokens_differ_quantized", "dense_vs_dequantized",
                     "tokens_differ_dequantized", "dense_calls", "plumbing_differs"]
    for name, value, tol in lines:
        assert float(value) < float(tol), name


def _step_inputs(rows: int, page: int, gen):
    from orcd.models.layers.attention import AttnMetadata

    tables = torch.arange(8 * rows, dtype=torch.int32, device="cuda").view(rows, 8)
    pos = torch.randint(0, 100, (rows,), device="cuda", generator=gen)
    slots = tables.gather(1, (pos // page)[:, None].int()).view(-1).long() * page + pos % page
    meta = AttnMetadata(cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32, device="cuda"),
                        seq_lens=(pos + 1).int(), block_tables=tables, slot_mapping=slots,
                        max_query_len=1, max_seq_len=int(pos.max()) + 1)
    return pos, meta


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("rows", [3, 8, 64])
@torch.inference_mode()
def test_dense_route_matches_quantized_cuda(tmp_path, rows):
    """bf16 Q4_K_M: the dense route (dense_rows=5; 3 rows stay quantized) == the quantized route to bf16
    rounding, same argmax on >= 95 % of rows (random weights: near-ties flip)."""
    from orcd.cli.synth import synth_like
    from orcd.loading.loader import load_model
    from orcd.models.kv_cache import KVCache
    from orcd.runner.fused_decode import FusedDecoder

    path, _ = synth_like(str(tmp_path / "m.gguf"), "tiny-qwen2-256", "Q4_K_M")
    loaded = load_model(path, "cuda", dtype=torch.bfloat16, tokenizer=False)
    quant, dense = FusedDecoder(loaded.model), FusedDecoder(loaded.model, dense_rows=5)
    gen = torch.Generator(device="cuda").manual_seed(rows)
    pos, meta = _step_inputs(rows, 16, gen)
    ids = torch.randint(0, loaded.cfg.vocab_size, (rows,), device="cuda", generator=gen)
    kv_a, kv_b = (KVCache.allocate(loaded.cfg, 8 * rows, 16, "cuda", torch.bfloat16) for _ in range(2))
    a, b = quant(ids, pos, meta, kv_a), dense(ids, pos, meta, kv_b)
    if rows < 5:  # below dense_rows: the same kernels
        assert float((a - b).norm() / a.norm()) < 1e-6
        return
    assert float((a - b).norm() / a.norm()) < 2e-2
    assert float((a.argmax(-1) == b.argmax(-1)).float().mean()) >= 0.95


@pytest.mark.gpu
@needs_cuda
@torch.inference_mode()
def test_dense_route_in_decode_graphs(tmp_path):
    """The dense route captured in DecodeGraphs replays to its eager step's logits (cuBLAS may pick
    another algorithm under capture: to bf16 rounding, same argmax)."""
    from orcd.cli.synth import synth_like
    from orcd.loading.loader import load_model
    from orcd.models.kv_cache import KVCache
    from orcd.runner.decode_graphs import DecodeGraphs
    from orcd.runner.fused_decode import FusedDecoder

    path, _ = synth_like(str(tmp_path / "m.gguf"), "tiny-qwen2-256", "Q4_K_M")
    loaded = load_model(path, "cuda", dtype=torch.bfloat16, tokenizer=False)
    kv = KVCache.allocate(loaded.cfg, 8 * 8 + 1, 16, "cuda", torch.bfloat16)
    dense = FusedDecoder(loaded.model, dense_rows=4)
    graphs = DecodeGraphs(loaded.model, kv, 16, 8, scratch_block=64, buckets=(8,), step_fn=dense)
    graphs.capture()
    gen = torch.Generator(device="cuda").manual_seed(1)
    pos, meta = _step_inputs(8, 16, gen)
    ids = torch.randint(0, loaded.cfg.vocab_size, (8,), device="cuda", generator=gen)
    logits, _ = graphs.replay(ids, pos, meta.slot_mapping, meta.seq_lens, meta.block_tables)
    eager = dense(ids, pos, meta, kv)
    assert float((logits - eager).norm() / eager.norm()) < 1e-2
    assert torch.equal(logits.argmax(-1), eager.argmax(-1))


@pytest.mark.gpu
@needs_cuda
def test_engine_dense_batch_rows(tmp_path):
    """LLMEngine(dense_batch_rows=4): the copies reach the captured fused step, their bytes are reported,
    and 8 greedy streams give the quantized engine's tokens (>= 90 %: random weights have near-ties)."""
    from orcd.cli.synth import synth_like
    from orcd.engine.io import EngineRequest
    from orcd.engine.llm_engine import LLMEngine
    from orcd.engine.sampling_params import SamplingParams
    from orcd.loading.loader import load_model

    path, _ = synth_like(str(tmp_path / "m.gguf"), "tiny-qwen2-256", "Q4_K_M")
    loaded = load_model(path, "cuda", dtype=torch.bfloat16)
    tokens = []
    for rows in (None, 4):
        eng = LLMEngine(loaded, num_kv_blocks=64, max_num_seqs=8, dense_batch_rows=rows)
        st = eng.stats()
        if rows is not None:
            assert eng.runner.graph.step_fn.dense_rows == 4
            assert st["dense_weights_bytes"] == eng.dense.nbytes > 0
            assert st["weights_bytes"] == loaded.weights_bytes + eng.dense.nbytes
        sp = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
        for i in range(8):
            eng.add_request(EngineRequest(f"r{i}", [10 + i, 20 + 3 * i, 30], sp))
        out: dict[str, list[int]] = {}
        while eng.has_work():
            for ev in eng.step():
                if ev.token_id is not None:
                    out.setdefault(ev.request_id, []).append(ev.token_id)
        tokens.append([t for k in sorted(out) for t in out[k]])
        del eng
    same = sum(a == b for a, b in zip(*tokens, strict=True))
    assert len(tokens[0]) == 64 and same >= 0.9 * 64
