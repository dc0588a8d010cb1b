"""The engine with grammars (CPU, tiny random model, synthetic byte-level vocabulary): constrained and
free rows in one batch, preemption (recompute) mid-grammar, cancellation."""

from __future__ import annotations

import json

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.structured.grammars import response_format_grammar

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "tag": {"enum": ["red", "green", "blue"]},
                                           "note": {"type": "string", "maxLength": 6}},
          "required": ["id", "tag", "note"], "additionalProperties": False}
GRAMMAR = response_format_grammar({"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}})



def run(engine: LLMEngine, reqs: dict[str, SamplingParams], prompt: list[int], cancel: str | None = None,
        after: int = 3) -> tuple[dict[str, str], dict[str, str]]:
    for rid, sp in reqs.items():
        engine.add_request(EngineRequest(rid, prompt, sp))
    text, reason, steps = {r: "" for r in reqs}, {}, 0
    while engine.has_work():
        for ev in engine.step():
            text[ev.request_id] += ev.text
            if ev.finished:
                reason[ev.request_id] = ev.finish_reason
        steps += 1
        if steps == after and cancel:
            engine.abort(cancel)
    return text, reason


def test_mixed_batch_preemption_and_cancel(loaded):
    prompt = loaded.tokenizer.encode("hello there")
    free = {f"f{i}": SamplingParams(max_tokens=24, seed=i, ignore_eos=True) for i in range(3)}
    constrained = {f"g{i}": SamplingParams(max_tokens=96, seed=i, temperature=1.0 if i % 2 else 0.0,
                                           grammar=GRAMMAR) for i in range(5)}
    roomy = LLMEngine(loaded, num_kv_blocks=256, max_num_seqs=16)
    alone, _ = run(roomy, free, prompt)
    text, reason = run(roomy, {**free, **constrained, "gx": SamplingParams(max_tokens=96, seed=9,
                                                                         grammar=GRAMMAR)}, prompt, "gx")
    assert {k: text[k] for k in free} == alone  # free rows do not see the grammar rows beside them
    assert reason["gx"] == "cancelled"
    for k in constrained:
        assert reason[k] == "eos", text[k]
        obj = json.loads(text[k])
        assert set(obj) == {"id", "tag", "note"} and obj["tag"] in ("red", "green", "blue")
    # a KV pool too small for all at once: sequences are preempted and recomputed mid-grammar, their
    # matchers keep their state, and the answers are the same
    tight = LLMEngine(loaded, num_kv_blocks=12, block_size=16, max_num_seqs=16)
    again, _ = run(tight, constrained, prompt)
    assert tight.scheduler.num_preemptions > 0
    assert again == {k: text[k] for k in constrained}
