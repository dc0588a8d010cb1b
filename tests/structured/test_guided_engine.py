"""The engine (CPU, tiny random model) with check first on and off: the same tokens for JSON schema, regex
and forced tool-call grammars -- greedy, seeded sampling, top-p (masked first) -- beside free rows, and
every constrained token allowed by its grammar."""

from __future__ import annotations

import llguidance
import pytest

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.structured.grammars import json_schema_grammar, regex_grammar
from orcd.structured.tool_grammar import forced_tool_grammar

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "tag": {"enum": ["red", "green", "blue"]},
                                           "note": {"type": "string", "maxLength": 6}},
          "required": ["id", "tag", "note"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}]



def requests() -> dict[str, SamplingParams]:
    grammars = {"json": json_schema_grammar(SCHEMA, "s"), "re": regex_grammar("(ab|c)+d", "r"),
                "tool": forced_tool_grammar(TOOLS, "required")}
    samplings = {"greedy": dict(temperature=0.0), "seeded": dict(temperature=1.0, seed=11),
                 "topp": dict(temperature=1.0, seed=12, top_p=0.9)}
    reqs = {f"{g}-{s}": SamplingParams(max_tokens=40, grammar=grammar, **kw)
            for g, grammar in grammars.items() for s, kw in samplings.items()}
    return reqs | {f"free{i}": SamplingParams(max_tokens=40, seed=i, ignore_eos=True) for i in range(2)}


def run(loaded, check_first: bool, mask_ahead: bool = True) -> tuple[dict[str, list[int]], LLMEngine]:
    engine = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16)
    engine.grammars().check_first = check_first
    engine.grammars().mask_ahead = mask_ahead
    prompt = loaded.tokenizer.encode("give me json")
    reqs = requests()
    for rid, sp in reqs.items():
        engine.add_request(EngineRequest(rid, prompt, sp))
    out: dict[str, list[int]] = {r: [] for r in reqs}
    while engine.has_work():
        for ev in engine.step():
            assert not ev.error, ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
    return out, engine


@pytest.mark.parametrize("mask_ahead", [True, False])
def test_check_first_gives_the_same_tokens_in_the_engine(loaded, mask_ahead):
    """Check first, with the per-row policy (cheap rows masked first) or without (every row checked),
    gives the full mask's tokens in the engine; outputs valid, some ended by EOS."""
    fast, engine = run(loaded, True, mask_ahead)
    full, _ = run(loaded, False)
    assert fast == full
    eos, ended = engine.grammars().eos_ids, 0
    for rid, sp in requests().items():
        if sp.grammar is None:
            continue
        toks = fast[rid]
        body = toks[:-1] if toks[-1] in eos else toks
        m = llguidance.LLMatcher(engine.grammars().lltok, sp.grammar, log_level=0)
        assert m.validate_tokens(body) == len(body), rid
        if body is not toks:  # ended by EOS: where the grammar accepts
            m.consume_tokens(body)
            assert m.is_accepting(), rid
            ended += 1
    assert ended >= 3


ENDLESS = {"type": "object", "properties": {"items": {"type": "array", "minItems": 400, "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"], "additionalProperties": False}}}, "required": ["items"]}


def _cuda_batch(model, grammar: str, n_held: int, check_first: bool) -> list[list[int]]:
    """8 greedy requests of 32 tokens, the first n_held held to `grammar`, the rest free (ignore EOS), on a
    fresh engine with prefix caching off -> each one's tokens."""
    engine = LLMEngine(model, num_kv_blocks=256, max_num_seqs=8, enable_prefix_caching=False)
    engine.grammars().check_first = check_first
    for i in range(8):
        sp = SamplingParams(max_tokens=32, temperature=0.0, grammar=grammar if i < n_held else None,
                            ignore_eos=i >= n_held)
        engine.add_request(EngineRequest(f"r{i}", [(7 * i + 3 * j) % 1000 + 1 for j in range(20)], sp))
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(8)}
    while engine.has_work():
        for ev in engine.step():
            assert not ev.error, ev.error
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
    return [out[f"r{i}"] for i in range(8)]


@pytest.mark.gpu
@pytest.mark.parametrize("n_held", [4, 8])
def test_on_cuda_check_first_equals_the_full_mask(cuda_model, n_held):
    """CUDA graphs, masks filled while the graph runs, pinned uploads: a batch of 8, n_held held to a
    schema that cannot end within max_tokens (the batch never shrinks), gives the same tokens on both
    paths. All 8 held: the rows filled ahead (mask_ahead) are the whole batch, in fill order."""
    grammar = json_schema_grammar(ENDLESS, "s")
    fast = _cuda_batch(cuda_model, grammar, n_held, True)
    full = _cuda_batch(cuda_model, grammar, n_held, False)
    assert fast == full and all(len(t) == 32 for t in fast)


@pytest.mark.gpu
def test_on_cuda_free_rows_keep_their_tokens_beside_constrained_rows(cuda_model):
    """The 4 free rows of that batch equal an all-free batch's. Prefix caching off: a prompt served from
    the cache is prefilled as a shorter step, whose kernels may round differently and flip a random
    model's argmax (the likely cause of bench/results/mask_cost.md's free rows differing at 8 streams,
    where the second round's prompts came from the cache)."""
    grammar = json_schema_grammar(ENDLESS, "s")
    assert _cuda_batch(cuda_model, grammar, 4, True)[4:] == _cuda_batch(cuda_model, grammar, 0, True)[4:]
