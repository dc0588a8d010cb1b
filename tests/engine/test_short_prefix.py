"""Short cached prefixes are recomputed when the runner replays prefill graphs (issue 19): a step that
holds a cached prefix cannot replay a fresh-prompt graph, so a hit of a few blocks (a chat template's
header) cost a whole eager step. BlockManager(min_prefix_hit=...) and LLMEngine's default, on the CPU."""

from __future__ import annotations

import pytest
from engine_fakes import FakeRunner, fake_engine, fake_loaded, reference, run_all, tokens_of

from orcd.engine.block_manager import BlockManager
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import SHORT_PREFIX_TOKENS, LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.engine.sequence import Sequence


def seq(tokens):
    return Sequence("r", list(tokens), SamplingParams())


def cached_manager(prefix_len: int, min_prefix_hit: int) -> tuple[BlockManager, Sequence]:
    """A pool of 4-token blocks where a finished sequence left prefix_len tokens (+ 1) cached."""
    bm = BlockManager(32, 4, min_prefix_hit=min_prefix_hit)
    a = seq(range(prefix_len + 1))
    assert bm.append_slots(a, a.num_tokens)
    a.num_computed = a.num_tokens
    bm.cache_full_blocks(a)
    bm.free_seq(a)
    return bm, a


def test_hit_under_the_minimum_is_recomputed_and_leaves_no_reference():
    bm, _ = cached_manager(8, min_prefix_hit=12)  # 2 cached blocks = 8 tokens < 12
    free = bm.num_free_blocks
    b = seq([*range(8), 99, 98])
    assert bm.take_prefix(b) == 0 and b.block_table == [] and b.num_cached_tokens == 0
    assert bm.num_free_blocks == free and all(blk.ref_count == 0 for blk in bm.blocks)
    assert bm.append_slots(b, b.num_tokens)
    bm.count_admission(b)
    assert (bm.prefix_hits, bm.prefix_skipped, bm.prefix_queries) == (0, 8, 10)
    bm.check_integrity([b])


def test_hit_at_the_minimum_is_taken():
    bm, a = cached_manager(12, min_prefix_hit=12)
    b = seq([*range(12), 99])
    assert bm.take_prefix(b) == 12 and b.num_cached_tokens == 12
    bm.count_admission(b)
    assert (bm.prefix_hits, bm.prefix_skipped) == (12, 0)
    bm.check_integrity([b])


def test_recomputed_prefix_does_not_replace_the_cached_blocks():
    bm, _ = cached_manager(8, min_prefix_hit=12)
    cached = dict(bm.cached)
    b = seq([*range(8), 99])
    bm.take_prefix(b)
    assert bm.append_slots(b, b.num_tokens)
    b.num_computed = b.num_tokens
    bm.cache_full_blocks(b)
    assert bm.cached == cached  # the first copy stays registered; b's own blocks free as uncached
    bm.free_seq(b)
    bm.check_integrity([])


def test_engine_default_recomputes_short_prefixes_only_with_prefill_graphs():
    def engine(runner):
        return LLMEngine(fake_loaded(512), num_kv_blocks=64, block_size=4, runner=runner,
                         warm_prefill_graphs=False)

    plain = FakeRunner(64, 4)
    assert engine(plain).block_manager.min_prefix_hit == 0  # CPU, eager, TP: every hit taken
    graphs = FakeRunner(64, 4)
    graphs.prefill_graphs = object()
    assert engine(graphs).block_manager.min_prefix_hit == SHORT_PREFIX_TOKENS
    graphs.prefill_graphs = None  # a runner whose prefill graphs are off
    assert engine(graphs).block_manager.min_prefix_hit == 0


def test_engine_tokens_equal_and_only_the_long_prefix_is_taken():
    engine, runner = fake_engine(num_blocks=64, block_size=4, min_prefix_hit=16)
    short, long_ = list(range(1, 13)), list(range(20, 40))  # 12 / 20 cached tokens
    for rid, prompt in (("s0", short + [5]), ("l0", long_ + [5])):
        engine.add_request(EngineRequest(rid, prompt, SamplingParams(max_tokens=2, temperature=0.0)))
        run_all(engine)
    computed = sum(s.num_tokens for s in runner.calls)
    sp = SamplingParams(max_tokens=3, temperature=0.0)
    for rid, prompt in (("s1", short + [7, 8]), ("l1", long_ + [7, 8])):
        engine.add_request(EngineRequest(rid, prompt, sp))
        events = run_all(engine)
        assert tokens_of(events[rid]) == reference(prompt, sp)
    st = engine.stats()
    assert st["prefix_cache_recomputed"] == 12 and st["prefix_cache_hits"] == 20
    # s1: 14 prompt tokens computed; l1: 2 (20 cached); + 2 decode steps each
    assert sum(s.num_tokens for s in runner.calls) - computed == 14 + 2 + 2 + 2


class IdTokenizer:
    """Token ids as text (test_engine_e2e's): no vocabulary needed."""

    eog_ids = frozenset({383})

    def detokenizer(self, skip_special: bool = False):
        return self

    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return ""


def test_real_runner_gives_the_same_tokens_recomputed_or_cached(tmp_path):
    """The real ModelRunner (tiny random qwen2, CPU fp32): B shares A's first 32 tokens; taken from the
    cache (rule 0) or recomputed (rule 64), B's greedy tokens equal B's alone on a fresh engine."""
    import torch

    from orcd.gguf.synth import write_model_gguf
    from orcd.loading.loader import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = write_model_gguf(tmp_path / "tiny.gguf", "qwen2", vocab_size=384, hidden=64, n_layers=2,
                                ffn=128, n_heads=4, n_kv_heads=2, context_length=512, seed=3)
        loaded = load_model(path, "cpu", tokenizer=False)
        loaded.tokenizer = IdTokenizer()
        shared = [(7 * i) % 300 + 1 for i in range(32)]
        a, b = shared + [11, 12, 13], shared + [21, 22]
        sp = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)

        def run(rule: int | None, prompts: list[list[int]]):
            engine = LLMEngine(loaded, num_kv_blocks=64, block_size=16, min_prefix_hit=rule)
            outs = []
            for i, prompt in enumerate(prompts):
                engine.add_request(EngineRequest(f"r{i}", prompt, sp))
                while engine.has_work():
                    outs += [(ev.request_id, ev.token_id) for ev in engine.step() if ev.token_id is not None]
            return [t for rid, t in outs if rid == f"r{len(prompts) - 1}"], engine.stats()

        alone, _ = run(0, [b])
        cached, st0 = run(0, [a, b])
        recomputed, st64 = run(64, [a, b])
        assert st0["prefix_cache_hits"] == 32 and st0["prefix_cache_recomputed"] == 0
        assert st64["prefix_cache_hits"] == 0 and st64["prefix_cache_recomputed"] == 32
        assert cached == recomputed == alone and len(alone) == 6
    finally:
        torch.set_num_threads(threads)


def test_serve_option_parsed_refused_and_built(tiny_qwen2_gguf, capsys):
    """`orcd serve --min-prefix-hit N` reaches the engine; negative or non-numbers are refused by name."""
    from orcd.cli.main import build_parser
    from orcd.cli.serve import engine_build

    parser = build_parser("serve")
    assert parser.parse_args(["serve"]).min_prefix_hit is None  # the engine's own default
    for bad in ("-1", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--min-prefix-hit", bad])
        assert "--min-prefix-hit: must be a whole number of tokens >= 0" in capsys.readouterr().err
    build = engine_build(parser.parse_args(["serve", "--min-prefix-hit", "48", "--device", "cpu"]),
                         tiny_qwen2_gguf)
    assert build.min_prefix_hit == 48
    assert build.build().block_manager.min_prefix_hit == 48  # the CPU's default would be 0
