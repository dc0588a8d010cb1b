"""On CUDA: an engine built on a model that an earlier engine left batch-invariant (its last step was
invariant) captures its prefill graphs on the fast kernels and generates what an engine built on the
model with the layers off generates. Before the fix its prefill graphs captured the invariant attention,
whose host-built tile lists the replays re-read from freed host memory: tests/engine/test_engine_gpu.py
[2048-4096-graphs-seeded] after [2048-4096-graphs-all] ended in an illegal memory access."""

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.models.layers.attention import AttnMetadata
from orcd.numerics import invariant_layers, set_batch_invariant
from tests.engine.test_engine_e2e import run
from tests.engine.test_engine_gpu import loaded, workload  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_engine_after_an_invariant_engine_captures_the_fast_prefill(loaded):  # noqa: F811
    layers = invariant_layers(loaded.model)
    reqs = [r for r in workload(16) if r.sampling.seed is None]  # 8 greedy requests without a seed
    kw = dict(num_kv_blocks=256, max_num_batched_tokens=256, enable_prefix_caching=False)
    want = run(LLMEngine(loaded, **kw), reqs)  # the layers are off: the reference
    seeded = EngineRequest("s", list(range(3, 40)), SamplingParams(max_tokens=4, seed=1, ignore_eos=True))
    run(LLMEngine(loaded, batch_invariant="all", **kw), [seeded])
    assert all(m.batch_invariant for m in layers)  # what the "all" engine leaves behind
    try:
        after = LLMEngine(loaded, **kw)
        assert not after.prefill_graph_warmup["failed"] and after.prefill_graph_warmup["buckets"]
        got = run(after, reqs)
        assert after.runner.prefill_graphs.replays > 0
        assert got == want
    finally:
        set_batch_invariant(layers, False)


def test_invariant_attention_refuses_a_capture_over_prefill_rows():
    from orcd.models.layers.attention_invariant import paged_attention_invariant

    dev, n = torch.device("cuda"), 40  # one sequence's 40-token prompt, blocks 0..2 of 16
    q = torch.randn(n, 4, 64, device=dev, dtype=torch.bfloat16)
    cache = torch.randn(4, 16, 2, 64, device=dev, dtype=torch.bfloat16)
    i32 = dict(dtype=torch.int32, device=dev)
    meta = AttnMetadata(cu_seqlens_q=torch.tensor([0, n], **i32), seq_lens=torch.tensor([n], **i32),
                        block_tables=torch.tensor([[0, 1, 2]], **i32),
                        slot_mapping=torch.arange(n, device=dev), max_query_len=n, max_seq_len=n,
                        cu_seqlens_q_host=[0, n], seq_lens_host=[n])
    paged_attention_invariant(q, cache, cache, meta, 0.125)  # eagerly: fine (and compiled)
    torch.cuda.synchronize()
    meta.cache = None
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            paged_attention_invariant(q, cache, cache, meta, 0.125)
