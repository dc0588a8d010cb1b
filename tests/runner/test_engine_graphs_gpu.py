"""On CUDA: the engine's decode steps replayed from CUDA graphs of the fused step == the eager engine.

float32 (weights kept quantized): greedy tokens must be identical for every generated token (24 each);
bfloat16: the fused kernels round in another order (docs/performance.md: relative logits difference
~0.04 on random weights), so there each picked token is checked against the eager logits.
"""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import AttnMetadata

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
VOCAB = 1024
QTYPES = {"default": Q.Q8_0, "attn_q": Q.Q5_0, "ffn_down": Q.Q4_K, "blk.1.ffn_down.weight": Q.Q6_K}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_model_gguf(tmp_path_factory.mktemp("graphs") / "m.gguf", "qwen2", vocab_size=VOCAB,
                            hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2, context_length=1024,
                            tied=False, seed=5, qtypes=QTYPES)


def prompts(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    return [torch.randint(0, VOCAB, (int(torch.randint(3, 90, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def generate(engine: LLMEngine, ps: list[list[int]], max_tokens: int) -> list[list[int]]:
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(ps):
        engine.add_request(EngineRequest(f"r{i}", p, sp))
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(len(ps))}
    while engine.has_work():
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
        engine.block_manager.check_integrity(engine.scheduler.live_seqs())
    assert engine.block_manager.num_used_blocks == 0
    return [out[f"r{i}"] for i in range(len(ps))]


@pytest.mark.parametrize("n", [1, 3, 6, 9])  # buckets 1, 4 (fused norms) and 8, 16 (dequantize + cuBLAS)
def test_graph_tokens_equal_eager_fp32(path, n):
    loaded = load_model(path, "cuda", dtype=torch.float32, tokenizer=False)
    loaded.tokenizer = _NoText()
    ps = prompts(n)
    eager = generate(LLMEngine(loaded, num_kv_blocks=128, max_num_seqs=16, enforce_eager=True), ps, 24)
    engine = LLMEngine(loaded, num_kv_blocks=128, max_num_seqs=16)
    graph = engine.runner.graph
    assert graph is not None and graph.fused and graph.buckets == (1, 2, 4, 8, 16)
    assert engine.runner.kv.num_blocks == 129  # + the scratch block
    assert generate(engine, ps, 24) == eager
    assert graph.steps >= 23


@torch.inference_mode()
def eager_logits(loaded, ids: list[int]) -> torch.Tensor:
    """Logits [len(ids), V] float32 of one eager prefill over ids (a fresh cache, blocks 0, 1, ...)."""
    n, page = len(ids), 16
    kv = KVCache.allocate(loaded.cfg, -(-n // page), page, "cuda", loaded.dtype)
    pos = torch.arange(n, device="cuda")
    meta = AttnMetadata(cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32, device="cuda"),
                        seq_lens=torch.tensor([n], dtype=torch.int32, device="cuda"),
                        block_tables=torch.arange(-(-n // page), dtype=torch.int32, device="cuda")[None],
                        slot_mapping=pos, max_query_len=n, max_seq_len=n, cu_seqlens_q_host=[0, n],
                        seq_lens_host=[n])
    ids_t = torch.tensor(ids, device="cuda")
    return loaded.model.compute_logits(loaded.model(ids_t, pos, meta, kv)).float()


def test_graph_greedy_is_eager_greedy_bf16(path):
    """bf16, 3 streams (bucket 4, norms fused into the GEMVs), 16 tokens each: every token the graphs
    picked is the eager model's greedy choice up to rounding (its eager logit within 0.25 standard
    deviations of the logits of the eager maximum; a random token is ~3 below), and >= 75% exactly."""
    loaded = load_model(path, "cuda", tokenizer=False)
    loaded.tokenizer = _NoText()
    engine = LLMEngine(loaded, num_kv_blocks=64, max_num_seqs=4)
    assert engine.runner.graph is not None and engine.runner.graph.buckets == (1, 2, 4)
    ps = prompts(3)
    exact = total = 0
    for p, toks in zip(ps, generate(engine, ps, 16), strict=True):
        logits = eager_logits(loaded, p + toks[:-1])[len(p) - 1:]  # row i predicts toks[i]
        chosen = logits.gather(1, torch.tensor(toks, device="cuda")[:, None])[:, 0]
        gap = (logits.max(dim=1).values - chosen) / logits.std(dim=1)
        assert float(gap.max()) < 0.25, gap.tolist()
        exact += int((logits.argmax(dim=1).cpu() == torch.tensor(toks)).sum())
        total += len(toks)
    assert exact >= 0.75 * total, (exact, total)


def test_enforce_eager_captures_nothing(path):
    loaded = load_model(path, "cuda", tokenizer=False)
    loaded.tokenizer = _NoText()
    engine = LLMEngine(loaded, num_kv_blocks=16, enforce_eager=True)
    assert engine.runner.graph is None and engine.runner.kv.num_blocks == 16


class _NoText:
    eog_ids = frozenset()

    def detokenizer(self, skip_special: bool = False):
        return self

    def push(self, token_id: int) -> str:
        return ""

    def flush(self) -> str:
        return ""
