"""On CUDA: LLMEngine captures every prefill-graph bucket at start, so serving captures none, and its tokens
are those of an engine that captures lazily (the same graphs, captured later)."""

import pytest
import torch

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model
from orcd.runner.prefill_graphs import capture_plan
from tests.runner.test_engine_graphs_gpu import _NoText
from tests.runner.test_prefill_graphs_gpu import VOCAB, path  # noqa: F401  (the module's model file)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def loaded(path):  # noqa: F811
    m = load_model(path, "cuda", dtype=torch.bfloat16, tokenizer=False)
    m.tokenizer = _NoText()
    return m


def tokens(engine: LLMEngine, waves: list[list[int]]) -> dict[str, list[int]]:
    """Waves of fresh prompts (lengths), each added while the previous wave decodes."""
    g, out = torch.Generator().manual_seed(11), {}
    for w, lengths in enumerate(waves):
        for i, n in enumerate(lengths):
            ids = torch.randint(0, VOCAB, (n,), generator=g).tolist()
            engine.add_request(EngineRequest(f"w{w}.{i}", ids, SamplingParams(max_tokens=4, temperature=0.0,
                                                                               ignore_eos=True)))
        for ev in engine.step() + engine.step():
            if ev.token_id is not None:
                out.setdefault(ev.request_id, []).append(ev.token_id)
    while engine.has_work():
        for ev in engine.step():
            if ev.token_id is not None:
                out.setdefault(ev.request_id, []).append(ev.token_id)
    return out


def test_every_bucket_captured_at_start_none_while_serving(loaded):
    engine = LLMEngine(loaded, num_kv_blocks=512, max_num_batched_tokens=1024)
    pg = engine.runner.prefill_graphs
    plan = capture_plan(pg.token_buckets, pg.seq_buckets, 1024)
    assert engine.prefill_graph_warmup["buckets"] == plan and set(pg.graphs) == set(plan)
    assert not pg.failed and engine.prefill_graph_warmup["seconds"] > 0
    seconds = pg.capture_seconds
    waves = [[5], [70, 3, 200], [16] * 9, [300, 500], [1000]]
    got = tokens(engine, waves)
    assert pg.capture_seconds == seconds and set(pg.graphs) == set(plan)  # nothing captured while serving
    assert pg.replays >= len(waves)
    lazy = LLMEngine(loaded, num_kv_blocks=512, max_num_batched_tokens=1024, warm_prefill_graphs=False)
    assert not lazy.runner.prefill_graphs.graphs and lazy.prefill_graph_warmup is None
    want = tokens(lazy, waves)
    assert len(lazy.runner.prefill_graphs.graphs) < len(plan)  # lazily: only the buckets that came up
    agree = sum(got[k] == want[k] for k in want)
    assert set(got) == set(want) and agree >= len(want) - 1  # bf16 near-ties aside
