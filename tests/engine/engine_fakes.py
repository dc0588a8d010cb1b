"""A fake model runner that really pages: it writes each computed token into a slot of a fake KV pool
and reads every sequence's history back *through its block table*. The next token is a hash of that
history, so a corrupted, overwritten or mis-mapped block changes the tokens and tests see it.
"""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import torch

from orcd.engine.io import ModelRunnerOutput, SchedulerOutput

EOS = 0
VOCAB = 40
# id -> text: 1..26 letters, then a few multi-character and whitespace pieces.
PIECES = {i: chr(ord("a") + i - 1) for i in range(1, 27)}
PIECES.update({27: " ", 28: "ab", 29: "\n", 30: "xyz", 31: "END", 32: "é"})
PIECES.update({i: f"<{i}>" for i in range(33, VOCAB)})


def next_token(history: list[int], num_generated: int, sampling, eos_every: int = 0) -> int:
    """The fake model: deterministic in (history, seed, num_generated), like a seeded sampler."""
    if sampling.greedy or sampling.seed is None:
        key = hash(tuple(history))
    else:
        key = hash((sampling.seed, num_generated, tuple(history)))
    r = random.Random(key)
    if eos_every and r.randrange(eos_every) == 0:
        return EOS
    return r.randrange(1, VOCAB)


def reference(prompt: list[int], sampling, eos_every: int = 0, script: list[int] | None = None) -> list[int]:
    """Tokens one request yields alone, without any cache: what the engine must reproduce."""
    history, out = list(prompt), []
    while len(out) < sampling.max_tokens:
        tok = script[len(out)] if script else next_token(history, len(out), sampling, eos_every)
        out.append(tok)
        history.append(tok)
        if tok == EOS and not sampling.ignore_eos:
            break
    return out


class FakeRunner:
    def __init__(self, num_blocks: int, block_size: int, eos_every: int = 0, scripts=None):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.slots: dict[int, tuple[int, int]] = {}  # slot -> (token id, position)
        self.eos_every = eos_every
        self.scripts = scripts or {}  # first prompt token -> forced output tokens
        self.fail_when = None  # callable(ScheduledSeq) -> bool: raise inside execute
        self.calls: list[SchedulerOutput] = []
        self.delay_s = 0.0  # sleep per step: makes a fake step take time, like a real one

    def slot(self, table: list[int], pos: int) -> int:
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.calls.append(sched)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_when and any(self.fail_when(s) for s in sched.seqs):
            raise RuntimeError("injected failure")
        sampled = {}
        for s in sched.seqs:
            end = s.num_computed + len(s.token_ids)
            assert len(s.block_table) * self.block_size >= end
            assert all(0 <= b < self.num_blocks for b in s.block_table)
            history = []
            for pos in range(s.num_computed):
                tok, at = self.slots[self.slot(s.block_table, pos)]
                assert at == pos, f"slot holds position {at}, expected {pos}"
                history.append(tok)
            for i, tok in enumerate(s.token_ids):
                self.slots[self.slot(s.block_table, s.num_computed + i)] = (tok, s.num_computed + i)
            history += s.token_ids
            if s.sample:
                script = self.scripts.get(history[0])
                n_prompt = len(history) - s.num_generated
                if script is not None:
                    sampled[s.seq_id] = script[s.num_generated]
                else:
                    sampled[s.seq_id] = next_token(history, s.num_generated, s.sampling, self.eos_every)
                assert n_prompt > 0
        return ModelRunnerOutput(sampled=sampled)


class FakeDetokenizer:
    def push(self, token_id: int) -> str:
        return PIECES.get(token_id, "")

    def flush(self) -> str:
        return ""


class FakeTokenizer:
    eog_ids = frozenset({EOS})
    eos_id = EOS
    bos_id = None
    vocab_size = VOCAB

    def detokenizer(self, skip_special: bool = False) -> FakeDetokenizer:
        return FakeDetokenizer()

    def decode(self, ids, skip_special=False) -> str:
        return "".join(PIECES.get(i, "") for i in ids)


def fake_loaded(context_length: int = 512):
    cfg = SimpleNamespace(context_length=context_length, vocab_size=VOCAB, n_layers=1, n_kv_heads=1,
                          head_dim=4, arch="fake")
    return SimpleNamespace(cfg=cfg, tokenizer=FakeTokenizer(), dtype=torch.float32, device="cpu",
                           weights_bytes=123, model=None, gguf=None)


def fake_engine(num_blocks=64, block_size=4, eos_every=0, scripts=None, **kw):
    from orcd.engine.llm_engine import LLMEngine

    runner = FakeRunner(num_blocks, block_size, eos_every, scripts)
    engine = LLMEngine(fake_loaded(kw.pop("context_length", 512)), num_kv_blocks=num_blocks,
                       block_size=block_size, runner=runner, **kw)
    return engine, runner


def run_all(engine, check=True, max_steps=100_000):
    """Step until idle; returns request_id -> list of events. Checks block integrity every step."""
    events: dict[str, list] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            break
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
        if check:
            engine.block_manager.check_integrity(engine.scheduler.live_seqs())
    else:
        raise AssertionError("engine did not finish")
    return events


def tokens_of(evs) -> list[int]:
    return [e.token_id for e in evs if e.token_id is not None]


def text_of(evs) -> str:
    return "".join(e.text for e in evs)
