"""Overlapped steps under tensor parallelism (TPRunner.launch: the input ids broadcast from rank 0's device)
with grammar rows, logprobs, penalties, stop tokens, aborts, arrivals and preemption: two gloo ranks give the
tokens, logprobs and finish reasons of the same two ranks one step at a time. CPU."""

from __future__ import annotations

import json

import pytest
from gguf import GGMLQuantizationType as Q
from tp_workers import guided_rank

from orcd.distributed.runtime import launch
from orcd.gguf.synth import write_model_gguf


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("tpg")
    path = write_model_gguf(d / "tiny.gguf", "qwen2", vocab_size=320, hidden=64, n_layers=2, ffn=128,
                            n_heads=4, n_kv_heads=2, context_length=1024, seed=3, qtypes={"default": Q.Q8_0})
    out = d / "guided.json"
    assert launch(2, "cpu", guided_rank, (str(path), str(out)), threads=1) == 0
    return json.loads(out.read_text())


def test_overlapped_tp_steps_equal_one_step_at_a_time(results):
    assert results["overlap"] == results["serial"]
    assert results["overlapped"]["overlap"] > 10 and results["overlapped"]["serial"] == 0
    tokens, reasons = results["overlap"]
    assert len(tokens) >= 12 and set(reasons.values()) <= {"eos", "stop", "length"}
    assert any(lp is not None for _, lp in tokens["json-logprobs"])


def test_overlapped_tp_steps_under_aborts_arrivals_and_preemption(results):
    tokens, reasons = results["churn"]
    serial_tokens, _ = results["serial"]
    assert reasons["json-greedy"] == "cancelled" and reasons["free1"] == "cancelled"
    assert results["overlapped"]["churn"] > 0 and results["preemptions"] > 0
    for rid, pairs in tokens.items():  # the requests that ran to the end give the uninterrupted tokens
        if reasons[rid] != "cancelled" and rid in serial_tokens:
            assert [t for t, _ in pairs] == [t for t, _ in serial_tokens[rid]], rid
