"""SamplingParams.logprobs: the engine returns, per sampled token, log-softmax of the logits the sampler
used (after penalties) and the top k, checked against a from-scratch reference forward (CPU, fp32)."""

import pytest
import torch

from orcd.engine.io import EngineRequest, ScheduledSeq, SchedulerOutput
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import RequestError
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner, prepare_inputs

VOCAB = 384


class _Detok:
    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return ""


class _Tokenizer:
    eog_ids = frozenset({VOCAB - 1})

    def detokenizer(self, skip_special: bool = False):
        return _Detok()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = write_model_gguf(tmp_path_factory.mktemp("lp") / "tiny.gguf", "qwen2", vocab_size=VOCAB, hidden=64,
                           n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=512, seed=5)
    m = load_model(path, "cpu", tokenizer=False)
    m.tokenizer = _Tokenizer()
    return m


def reference_logits(loaded, tokens: list[int]) -> torch.Tensor:
    """Logits [T, V] of every position of `tokens`, one fresh prefill of the whole sequence."""
    runner = ModelRunner(loaded, num_kv_blocks=64, block_size=16)
    seq = ScheduledSeq(0, tokens, 0, list(range((len(tokens) + 15) // 16)), True, SamplingParams())
    inp = prepare_inputs(SchedulerOutput([seq], len(tokens)), 16, torch.device("cpu"))
    with torch.inference_mode():
        hidden = loaded.model(inp.input_ids, inp.positions, inp.attn, runner.kv)
        return loaded.model.compute_logits(hidden).float()


def penalized(logits: torch.Tensor, seen: list[int], p: SamplingParams) -> torch.Tensor:
    out = logits.clone()
    counts = torch.bincount(torch.tensor(seen), minlength=VOCAB).float()
    hit = counts > 0
    out[hit] = torch.where(out[hit] > 0, out[hit] / p.repetition_penalty, out[hit] * p.repetition_penalty)
    return out - p.frequency_penalty * counts - p.presence_penalty * hit.float()


REQUESTS = [
    ("greedy", [5, 9, 33, 7] * 3, SamplingParams(max_tokens=6, temperature=0.0, logprobs=3, ignore_eos=True)),
    ("hot", list(range(10, 40)), SamplingParams(max_tokens=7, temperature=1.3, top_k=20, seed=11, logprobs=5,
                                               ignore_eos=True)),
    ("penalized", [1, 2, 3, 1, 2, 3, 4], SamplingParams(max_tokens=8, temperature=0.7, seed=2, logprobs=0,
                                                      repetition_penalty=1.3, presence_penalty=0.5,
                                                      frequency_penalty=0.4, ignore_eos=True)),
    ("plain", [100, 200, 300], SamplingParams(max_tokens=5, temperature=0.9, seed=4, ignore_eos=True)),
]


def test_logprobs_match_the_reference(loaded):
    engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16)
    for rid, prompt, params in REQUESTS:
        engine.add_request(EngineRequest(rid, prompt, params))
    events: dict[str, list] = {rid: [] for rid, _, _ in REQUESTS}
    while engine.has_work():
        for ev in engine.step():
            assert ev.finish_reason != "error", ev.error
            if ev.token_id is not None:
                events[ev.request_id].append(ev)
    for rid, prompt, params in REQUESTS:
        evs = events[rid]
        if params.logprobs is None:
            assert all(ev.logprobs is None for ev in evs)
            continue
        out = [ev.token_id for ev in evs]
        ref = reference_logits(loaded, prompt + out)
        for i, ev in enumerate(evs):
            row = ref[len(prompt) + i - 1]
            if params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty:
                row = penalized(row, prompt + out[:i], params)
            lp = torch.log_softmax(row, dim=-1)
            assert ev.logprobs.logprob == pytest.approx(lp[ev.token_id].item(), abs=1e-4)
            top = ev.logprobs.top
            assert len(top) == params.logprobs
            assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
            ref_top = lp.topk(params.logprobs).values.tolist()
            assert [v for _, v in top] == pytest.approx(ref_top, abs=1e-4)
            for tid, v in top:
                assert v == pytest.approx(lp[tid].item(), abs=1e-4)
            if top and ev.logprobs.logprob > top[-1][1] + 1e-4:  # the sampled token ranks: it is listed
                assert ev.token_id in [t for t, _ in top]
            if not params.greedy:
                continue
            assert ev.token_id == top[0][0]  # greedy: the sampled token is the most likely


def test_logprobs_bound_is_checked():
    with pytest.raises(RequestError) as exc:
        SamplingParams(logprobs=21).validate()
    assert exc.value.param == "logprobs"
    SamplingParams(logprobs=20).validate()
    SamplingParams(logprobs=0).validate()
