"""The engine (CPU, tiny random model) with check first on and off: the same tokens for JSON schema, regex
and forced tool-call grammars -- greedy, seeded sampling, top-p (masked first) -- beside free rows, and
every constrained token allowed by its grammar."""

from __future__ import annotations

import llguidance
import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.structured.grammars import json_schema_grammar, regex_grammar
from orcd.structured.tool_grammar import forced_tool_grammar

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "tag": {"enum": ["red", "green", "blue"]},
                                           "note": {"type": "string", "maxLength": 6}},
          "required": ["id", "tag", "note"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = write_model_gguf(tmp_path_factory.mktemp("g") / "tiny.gguf", "qwen2", vocab_size=320, hidden=64,
                            n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=1024, seed=3)
    yield load_model(path, "cpu")
    torch.set_num_threads(threads)


def requests() -> dict[str, SamplingParams]:
    grammars = {"json": json_schema_grammar(SCHEMA, "s"), "re": regex_grammar("(ab|c)+d", "r"),
                "tool": forced_tool_grammar(TOOLS, "required")}
    samplings = {"greedy": dict(temperature=0.0), "seeded": dict(temperature=1.0, seed=11),
                 "topp": dict(temperature=1.0, seed=12, top_p=0.9)}
    reqs = {f"{g}-{s}": SamplingParams(max_tokens=40, grammar=grammar, **kw)
            for g, grammar in grammars.items() for s, kw in samplings.items()}
    return reqs | {f"free{i}": SamplingParams(max_tokens=40, seed=i, ignore_eos=True) for i in range(2)}


def run(loaded, check_first: bool) -> tuple[dict[str, list[int]], LLMEngine]:
    engine = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16)
    engine.grammars().check_first = check_first
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


def test_check_first_gives_the_same_tokens_in_the_engine(loaded):
    fast, engine = run(loaded, True)
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
