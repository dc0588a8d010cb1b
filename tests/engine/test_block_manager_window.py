"""Sliding-window block release: when every attention layer is windowed, the blocks a sequence's future
queries can no longer see are released as it advances, on the block manager alone and through the engine
with a real (tiny, all-local) gemma3 model whose released blocks other requests then reuse."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.block_manager import BlockManager, releasable_window
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.engine.sequence import Sequence
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

WINDOW, BS = 8, 4
DIMS = dict(vocab_size=320, hidden=64, n_layers=3, ffn=128, n_heads=4, n_kv_heads=2, head_dim=32)


def test_releasable_window_needs_every_layer_windowed():
    assert releasable_window([8, 8, 8]) == 8
    assert releasable_window([8, 16]) == 16  # the widest window decides
    assert releasable_window([8, 8, 0]) == 0  # one global layer reads every position
    assert releasable_window([]) == 0


def advance(bm: BlockManager, seq: Sequence, n: int) -> None:
    assert bm.append_slots(seq, n)
    seq.num_computed += n
    bm.cache_full_blocks(seq)


def test_leading_blocks_released_as_the_window_moves():
    bm = BlockManager(16, BS, window=WINDOW)
    seq = Sequence("a", list(range(1, 22)), SamplingParams())
    advance(bm, seq, 21)  # positions 0..20 in 6 blocks
    assert bm.num_used_blocks == 6
    # the next query (position 21) sees keys 14..21: blocks 0..2 (positions 0..11) are dead, block 3 not
    assert bm.release_out_of_window(seq) == 3 and bm.num_used_blocks == 3
    assert bm.release_out_of_window(seq) == 0  # idempotent
    bm.check_integrity([seq])
    for _ in range(7):  # decode: one more block released every block_size tokens
        seq.prompt_token_ids.append(5)
        advance(bm, seq, 1)
    bm.check_integrity([seq])
    # 28 computed: the next query (28) sees 21..28, so blocks 0..4 (positions 0..19) are released
    assert bm.held_blocks(seq) == seq.block_table[5:] and bm.num_used_blocks == 2
    bm.free_seq(seq)  # frees only what it still holds
    bm.check_integrity([])
    assert bm.num_free_blocks == 16 and not bm.released


def test_released_blocks_stay_in_the_prefix_cache_until_reused():
    bm = BlockManager(8, BS, window=WINDOW)
    a = Sequence("a", list(range(1, 22)), SamplingParams())
    advance(bm, a, 21)
    bm.release_out_of_window(a)
    b = Sequence("b", list(range(1, 22)), SamplingParams())  # same prompt: its cached blocks come back
    assert bm.take_prefix(b) == 20
    bm.check_integrity([a, b])
    bm.free_seq(a)
    bm.free_seq(b)
    bm.check_integrity([])


def test_no_release_without_a_window():
    bm = BlockManager(16, BS)
    seq = Sequence("a", list(range(1, 40)), SamplingParams())
    advance(bm, seq, 39)
    assert bm.release_out_of_window(seq) == 0 and bm.num_used_blocks == 10


def gemma3_file(tmp_path, pattern: int):
    """Tiny gemma3. sliding_window_pattern 0: every layer local (llama.cpp); 3: every third global."""
    extra = {"gemma3.attention.sliding_window": WINDOW, "gemma3.attention.sliding_window_pattern": pattern}
    path = tmp_path / f"gemma3-p{pattern}.gguf"
    return write_model_gguf(path, "gemma3", tied=True, qtypes={"default": Q.F32}, seed=3, rope_theta=1e6,
                            extra_metadata=extra, **DIMS)


def test_mixed_model_releases_nothing(tmp_path):
    loaded = load_model(gemma3_file(tmp_path, 3), device="cpu", dtype=torch.float32, tokenizer=False)
    assert loaded.cfg.swa_layers == (True, True, False)
    eng = LLMEngine(loaded, num_kv_blocks=64, block_size=BS, enforce_eager=True)
    assert eng.block_manager.window == 0


@pytest.mark.parametrize("chunk", [64, 5])
def test_all_local_model_reuses_released_blocks_with_unchanged_output(tmp_path, chunk):
    """Four 21-token prompts, 24 greedy tokens each (45 positions = 12 blocks each, 48 together) in a pool
    of 20 blocks: they all run at once only because each holds ~4 blocks, and blocks one request released
    are rewritten by the others while it still runs. Every continuation equals the same model's greedy
    decode in a pool of 64 blocks with the release switched off."""
    loaded = load_model(gemma3_file(tmp_path, 0), device="cpu", dtype=torch.float32)
    assert all(loaded.cfg.swa_layers)
    prompts = [[(7 * i + 13 * j) % 300 + 1 for j in range(21)] for i in range(4)]
    ref_eng = LLMEngine(loaded, num_kv_blocks=64, block_size=BS, enforce_eager=True)
    ref_eng.block_manager.window = 0  # keep every block: the reference
    ref, _ = generate(ref_eng, prompts)
    eng = LLMEngine(loaded, num_kv_blocks=20, block_size=BS, max_num_seqs=4, max_num_batched_tokens=chunk,
                    enforce_eager=True, enable_prefix_caching=False)
    assert eng.block_manager.window == WINDOW
    got, peak = generate(eng, prompts)
    assert got == ref
    assert eng.scheduler.num_preemptions == 0 and peak <= 20
    assert eng.block_manager.num_used_blocks == 0 and not eng.block_manager.released


def generate(eng: LLMEngine, prompts: list[list[int]], n: int = 24) -> tuple[list[list[int]], int]:
    """Greedy continuations of all prompts at once, and the most blocks in use after any step."""
    greedy = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        eng.add_request(EngineRequest(f"r{i}", p, greedy))
    got: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    peak = 0
    while eng.has_work():
        for ev in eng.step():
            if ev.token_id is not None:
                got[ev.request_id].append(ev.token_id)
        peak = max(peak, eng.block_manager.num_used_blocks)
        eng.block_manager.check_integrity(eng.scheduler.live_seqs())
    return [got[f"r{i}"] for i in range(len(prompts))], peak
