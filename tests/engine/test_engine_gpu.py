"""On CUDA (bf16, weights kept quantized): 64 mixed seeded requests batched == each one alone."""

import random

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from tests.engine.test_engine_e2e import run  # checks block integrity after every step
from tests.engine.test_overlap import tokens_and_logprobs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
VOCAB = 1024


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = write_model_gguf(tmp_path_factory.mktemp("gpu") / "m.gguf", "qwen2", vocab_size=VOCAB, hidden=256,
                           n_layers=2, ffn=512, n_heads=4, n_kv_heads=2, context_length=1024, tied=False,
                           qtypes={"default": Q.Q8_0, "attn_q": Q.Q5_0, "ffn_down": Q.Q4_K}, seed=2)
    return load_model(path, "cuda")


def workload(n: int, seed: int = 0) -> list[EngineRequest]:
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB - 8) for _ in range(40)]
    reqs = []
    for i in range(n):
        own = [rng.randrange(VOCAB - 8) for _ in range(rng.randrange(1, 200))]
        kw = dict(max_tokens=rng.randrange(1, 40), ignore_eos=True)
        kw.update(temperature=0.0) if i % 2 else kw.update(temperature=0.8, top_p=0.9, seed=i)
        reqs.append(EngineRequest(f"r{i}", (system + own) if i % 3 == 0 else own, SamplingParams(**kw)))
    return reqs


@pytest.mark.parametrize("policy", ["all", "seeded"])
@pytest.mark.parametrize("enforce_eager", [True, False], ids=["eager", "graphs"])
@pytest.mark.parametrize("num_blocks,budget", [(2048, 4096), (2048, 256), (64, 1024)])
def test_batched_equals_alone_on_cuda(loaded, num_blocks, budget, enforce_eager, policy):
    """Big and small token budgets (chunked prefill), and a pool of 64 blocks that forces preemption
    (recomputed tokens go through prefill rows, first computed as decode rows). Policy "all": every
    request is batch-invariant; "seeded" (the default): the seeded ones, which here share steps with
    unseeded greedy requests run on the fast kernels when no seeded request is scheduled."""
    reqs = workload(64)
    alone_engine = LLMEngine(loaded, num_kv_blocks=128, enable_prefix_caching=False,
                             enforce_eager=enforce_eager, batch_invariant=policy)
    alone = {}
    for r in reqs:
        alone.update(run(alone_engine, [r]))
    engine = LLMEngine(loaded, num_kv_blocks=num_blocks, max_num_batched_tokens=budget,
                       enforce_eager=enforce_eager, batch_invariant=policy)
    batched = run(engine, reqs)
    checked = [r.request_id for r in reqs if policy == "all" or r.sampling.seed is not None]
    assert len(checked) >= 32
    diff = [rid for rid in checked if alone[rid] != batched[rid]]
    assert not diff, f"{len(diff)} of {len(checked)} requests differ, e.g. {diff[:4]}"
    if num_blocks == 64:
        assert engine.scheduler.num_preemptions > 0


def test_overlap_equals_one_step_at_a_time_on_cuda(loaded):
    """The overlap (decode graphs launched before the step before is read, input ids from the device)
    gives the tokens of one step at a time: the same steps, the same batch at every step."""
    reqs = workload(64, seed=1)
    one_at_a_time = run(LLMEngine(loaded, num_kv_blocks=2048, overlap=False), reqs)
    engine = LLMEngine(loaded, num_kv_blocks=2048)
    assert run(engine, reqs) == one_at_a_time
    assert engine.overlapped_steps > 0 and engine.runner.steps_by_executor.get("decode_graph", 0) > 0


def test_overlap_with_penalties_equals_one_step_at_a_time_on_cuda(loaded):
    """Penalized rows on the decode graphs, overlapped: the token still in flight is counted from the
    graph's input ids on the device."""
    def reqs():
        out = workload(16, seed=3)
        for i, r in enumerate(out):
            r.sampling = SamplingParams(max_tokens=r.sampling.max_tokens, ignore_eos=True, temperature=0.0,
                                        repetition_penalty=4.0 if i % 2 else 1.0, presence_penalty=1.0)
        return out

    one_at_a_time = run(LLMEngine(loaded, num_kv_blocks=2048, overlap=False), reqs())
    engine = LLMEngine(loaded, num_kv_blocks=2048)
    assert run(engine, reqs()) == one_at_a_time
    assert engine.overlapped_steps > 0 and engine.runner.steps_by_executor.get("decode_graph", 0) > 0


def test_overlap_with_logprobs_equals_one_step_at_a_time_on_cuda(loaded):
    """Logprobs of overlapped decode-graph steps (computed at launch, read with the tokens) are those of
    one step at a time."""
    def reqs():
        out = workload(16, seed=4)
        for i, r in enumerate(out):
            r.sampling = SamplingParams(max_tokens=r.sampling.max_tokens, ignore_eos=True, temperature=0.0,
                                        logprobs=3 if i % 2 else None)
        return out

    one_at_a_time = tokens_and_logprobs(LLMEngine(loaded, num_kv_blocks=2048, overlap=False), reqs())
    engine = LLMEngine(loaded, num_kv_blocks=2048)
    assert tokens_and_logprobs(engine, reqs()) == one_at_a_time
    assert engine.overlapped_steps > 0
