"""The engine with the real ModelRunner on a tiny random-weight GGUF (CPU, fp32)."""

import random

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

VOCAB = 384


class IdDetokenizer:
    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return ""


class IdTokenizer:
    """Token ids as text: keeps these tests about the engine, not about a vocabulary."""

    eog_ids = frozenset({VOCAB - 1})

    def detokenizer(self, skip_special: bool = False):
        return IdDetokenizer()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra threads only spin (10x slower on a busy 2-core box)
    path = write_model_gguf(tmp_path_factory.mktemp("e2e") / "tiny.gguf", "qwen2", vocab_size=VOCAB,
                           hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=512,
                           seed=3)
    m = load_model(path, "cpu", tokenizer=False)
    m.tokenizer = IdTokenizer()
    yield m
    torch.set_num_threads(threads)


def workload(n=16, seed=0):
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB - 1) for _ in range(20)]
    reqs = []
    for i in range(n):
        own = [rng.randrange(VOCAB - 1) for _ in range(rng.randrange(1, 60))]
        prompt = system + own if i % 3 == 0 else own
        kw = dict(max_tokens=rng.randrange(1, 24))
        if i % 2:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=0.9, top_p=0.95, top_k=50, seed=i, repetition_penalty=1.1)
        reqs.append(EngineRequest(f"r{i}", prompt, SamplingParams(**kw)))
    return reqs


def run(engine: LLMEngine, reqs) -> dict[str, list[int]]:
    for r in reqs:
        engine.add_request(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    while engine.has_work():
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
        engine.block_manager.check_integrity(engine.scheduler.live_seqs())
    assert engine.block_manager.num_used_blocks == 0
    return out


@pytest.fixture(scope="module")
def alone(loaded):
    """Each request run by itself, one after the other, no prefix cache."""
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16, enable_prefix_caching=False)
    result = {}
    for r in workload():
        result.update(run(engine, [r]))
    return result


@pytest.mark.parametrize(
    "num_blocks,block_size,budget",
    [(256, 16, 2048), (256, 16, 48), (12, 16, 256), (64, 4, 32)],
    ids=["one-step-prefill", "chunked", "preempting", "small-blocks"],
)
def test_batched_equals_alone(loaded, alone, num_blocks, block_size, budget):
    engine = LLMEngine(loaded, num_kv_blocks=num_blocks, block_size=block_size,
                       max_num_batched_tokens=budget)
    batched = run(engine, workload())
    assert batched == alone
    if num_blocks == 12:
        assert engine.stats()["num_preemptions"] > 0


def test_prefix_hits_give_the_same_tokens(loaded, alone):
    engine = LLMEngine(loaded, num_kv_blocks=128, block_size=16, max_num_batched_tokens=64)
    reqs = workload()
    first = run(engine, reqs[:1])
    again = run(engine, [EngineRequest("again", reqs[0].prompt_token_ids, reqs[0].sampling)])
    assert engine.stats()["prefix_cache_hits"] > 0
    assert first["r0"] == again["again"] == alone["r0"]


def test_cancel_mid_decode_frees_blocks(loaded):
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16)
    engine.add_request(EngineRequest("a", list(range(40)), SamplingParams(max_tokens=100, ignore_eos=True)))
    for _ in range(3):
        engine.step()
    assert engine.stats()["kv_blocks_used"] == 3
    engine.abort("a")
    (ev,) = engine.step()
    assert ev.finish_reason == "cancelled" and engine.stats()["kv_blocks_used"] == 0
    st = engine.stats()
    assert st["kv_cache_bytes"] == 2 * 2 * 64 * 16 * 2 * 16 * 4  # K+V, layers, blocks, bs, kv heads, hd, fp32
    assert st["kv_capacity_tokens"] == 64 * 16 and st["weights_bytes"] > 0
