"""gpt-oss vs HF GptOssForCausalLM on a tiny random GGUF (fp32, CPU): MXFP4 experts (4, top-2), Q/K/V/O
biases, attention sinks, YaRN RoPE, and an 8-token sliding window on the even layers, so prompts,
chunked prefill and decode all cross the window edge. Both ways of holding the experts: raw MXFP4 blocks
(only the routed experts' blocks dequantized per step; the rest F32) and dense F16 experts (the rest
Q8_0, run dequantized on the CPU, raw on the decode path's QuantLinears)."""

from __future__ import annotations

import random

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from hf_gpt_oss import hf_gpt_oss
from models_helpers import hf_greedy, hf_last_logits, orcd_last_logits, paged_greedy

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner

pytest.importorskip("transformers")
WINDOW = 8
# head_dim 32 != hidden / n_heads = 16, as gpt-oss-20b (64 vs 45); context = orig * factor, as the real file
DIMS = dict(vocab_size=320, hidden=64, n_layers=4, ffn=64, n_heads=4, n_kv_heads=2, head_dim=32, n_experts=4,
            n_experts_used=2, sliding_window=WINDOW, context_length=8192, yarn_factor=32.0,
            yarn_orig_context=256)
EXPERTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
QTYPES = {"default": Q.F32} | dict.fromkeys(EXPERTS, Q.MXFP4)
# name -> (types, keep_quantized): raw MXFP4 experts with a dequantized rest; dense F16 experts, raw Q8_0 rest
CASES = {"mxfp4-experts": (QTYPES, False),
         "f16-experts-q8_0-rest": ({"default": Q.Q8_0} | dict.fromkeys(EXPERTS, Q.F16), True)}
PROMPTS = [[7, 100, 42, 3, 250, 11, 19, 64, 5, 17, 33, 2, 90, 91, 92, 93, 8, 200, 5],  # 19 > window
           [1, 2, 3],
           list(range(40, 70))]  # 30 tokens, prefilled in chunks of 5
N_NEW = 32


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra threads only spin on a busy 2-core box
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_gpt_oss_gguf(tmp_path_factory.mktemp("gpt-oss") / "tiny.gguf", qtypes=QTYPES, seed=5,
                              **DIMS)


@pytest.fixture(scope="module")
def hf(path):
    return hf_gpt_oss(path)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """(orcd runner, HF model) on one file of each expert type."""
    qtypes, keep = CASES[request.param]
    p = write_gpt_oss_gguf(tmp_path_factory.mktemp(request.param) / "tiny.gguf", qtypes=qtypes, seed=7,
                           **DIMS)
    return runner(p, keep), hf_gpt_oss(p)


def runner(path, keep_quantized: bool) -> ModelRunner:
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False,
                        keep_quantized=keep_quantized)
    return ModelRunner(loaded, num_kv_blocks=64, block_size=4)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_config_and_layout(path):
    model = runner(path, keep_quantized=False).model
    cfg = model.cfg
    assert (cfg.n_experts, cfg.n_experts_used, cfg.expert_ffn_size, cfg.head_dim) == (4, 2, 64, 32)
    assert cfg.swa_layers == (True, False, True, False) and cfg.sliding_window == WINDOW
    assert (cfg.rope_scaling_type, cfg.rope_scaling_factor, cfg.rope_orig_context) == ("yarn", 32.0, 256)
    assert [b.attn.window for b in model.blocks] == [WINDOW, 0, WINDOW, 0]
    gate = model.blocks[0].moe.gate
    assert gate.qtype == Q.MXFP4 and gate.weight is None  # raw even where keep_quantized is off (CPU)
    assert gate.raw.shape == (4, 64, 2 * 17)  # [experts, rows, 2 blocks of 17 bytes]


def test_float_experts_are_dense(case):
    gate = case[0].model.blocks[0].moe.gate
    assert (gate.raw is None) == (gate.weight is not None)


def test_last_position_logits_match_hf(case):
    orcd, hf = case
    for ids in PROMPTS:
        assert rel_err(orcd_last_logits(orcd, ids), hf_last_logits(hf, ids)) < 1e-4


def test_greedy_batch_with_chunked_prefill_matches_hf(case):
    """Three prompts at once: the first prefilled whole, the third in 5-token chunks across the window
    edge while the others decode; 32 new tokens each (well past the window)."""
    orcd, hf = case
    got = paged_greedy(orcd, PROMPTS, N_NEW, [len(PROMPTS[0]), len(PROMPTS[1]), 5])
    for ids, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == hf_greedy(hf, ids, N_NEW)


class _IdDetokenizer:
    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return ""


class _IdTokenizer:
    eog_ids = frozenset()  # never stop early: 32 tokens each, as HF with min_new_tokens

    def detokenizer(self, skip_special: bool = False):
        return _IdDetokenizer()


def _engine_run(engine: LLMEngine, prompts: dict[str, list[int]],
                sampling: dict[str, SamplingParams] | None = None) -> dict[str, list[int]]:
    """Every prompt to the end (greedy, N_NEW tokens, unless `sampling` says otherwise) -> tokens by id."""
    greedy = SamplingParams(max_tokens=N_NEW, temperature=0.0)
    for rid, ids in prompts.items():
        engine.add_request(EngineRequest(rid, ids, (sampling or {}).get(rid, greedy)))
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    while engine.has_work():
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                got[ev.request_id].append(ev.token_id)
    return got


def test_engine_batch_of_different_lengths_matches_hf(path, hf):
    """LLMEngine: the three prompts at once under a 16-token budget (chunked prefill beside decode), then
    the first again from the prefix cache (its window-crossing blocks reused), then each one alone."""
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    loaded.tokenizer = _IdTokenizer()
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=4, max_num_batched_tokens=16)
    got = _engine_run(engine, {f"r{i}": ids for i, ids in enumerate(PROMPTS)})
    want = [hf_greedy(hf, ids, N_NEW) for ids in PROMPTS]
    assert [got[f"r{i}"] for i in range(len(PROMPTS))] == want
    assert _engine_run(engine, {"again": PROMPTS[0]})["again"] == want[0]
    assert engine.stats()["prefix_cache_hits"] > 0
    alone = LLMEngine(loaded, num_kv_blocks=64, block_size=4, enable_prefix_caching=False)
    for ids, tokens in zip(PROMPTS, want, strict=True):  # each prompt alone, whole prefill
        assert _engine_run(alone, {"one": ids})["one"] == tokens


def test_changing_one_expert_changes_output_only_where_routed(path):
    """Expert 1 of the last layer gets new MXFP4 codes: a prompt whose tokens never route to it keeps
    bit-identical logits; one that does changes."""
    r = runner(path, keep_quantized=True)
    moe = r.model.blocks[-1].moe
    routed: dict[int, set[int]] = {}
    def record(m, inp, out) -> None:
        routed[len(routed)] = set(m.route(inp[0])[0].flatten().tolist())

    hook = moe.register_forward_hook(record)
    prompts = [[t] for t in range(1, 60)]
    before = [orcd_last_logits(r, ids) for ids in prompts]
    hook.remove()
    expert = 1
    uses = [expert in routed[i] for i in range(len(prompts))]
    assert any(uses) and not all(uses)
    for raw in (moe.gate.raw, moe.up.raw, moe.down.raw):  # [E, rows, row_bytes]: 17-byte MXFP4 blocks
        blocks = raw.view(*raw.shape[:2], -1, 17)
        blocks[expert, :, :, 1:] ^= 0x88  # flip both codes' sign bits: this expert's weights negated
    for ids, old, used in zip(prompts, before, uses, strict=True):
        new = orcd_last_logits(r, ids)
        assert torch.equal(new, old) != used, (ids, used)


def test_seeded_sampling_alone_equals_batched(path):
    """Sampled (seeded) requests give the same tokens alone and batched, whole or chunked: the routed
    experts of a token do not depend on the other tokens of its step."""
    loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False)
    loaded.tokenizer = _IdTokenizer()
    rng = random.Random(0)
    reqs = {f"r{i}": [rng.randrange(319) for _ in range(rng.randrange(1, 40))] for i in range(8)}
    sampling = {rid: SamplingParams(max_tokens=16, temperature=0.9, top_p=0.95, seed=i)
                for i, rid in enumerate(reqs)}
    single = LLMEngine(loaded, num_kv_blocks=128, block_size=16, enable_prefix_caching=False)
    alone = {rid: _engine_run(single, {rid: prompt}, sampling)[rid] for rid, prompt in reqs.items()}
    for budget in (2048, 24):
        batched = LLMEngine(loaded, num_kv_blocks=128, block_size=16, max_num_batched_tokens=budget)
        assert _engine_run(batched, reqs, sampling) == alone
