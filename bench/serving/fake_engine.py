"""A stand-in for LLMEngine in `orcd serve`'s engine process, for measuring the HTTP layer on any CPU.

No model: each step sleeps as long as a GPU step of that many rows takes (step_ms = base + per_row x
rows + per prefill token), then gives every running request one token of fixed text. The defaults are
fitted to the H100's 0.5B Q4_K_M figures (session 7, bench/results/serving.md: 979 tok/s at 1 stream,
13,714 at 64), so on a CPU box the API process sees the token rate it sees on the H100, while the engine
process costs almost no CPU. Everything around the step is the real code: the engine process's loop and
IPC (orcd/engine/core_process.py), ProcessEngine, uvicorn, the routes.

With capture_ms > 0 the fake also pays for prefill CUDA graphs as the real engine does: the first step
whose fresh prompts fall in a (token bucket, sequence bucket) not seen before sleeps capture_ms more
(orcd.runner.prefill_graphs' buckets; ~100 ms on the H100), unless warm_graphs "captured" every bucket of
capture_plan at build (LLMEngine's warm_prefill_graphs). That is how lazily captured graphs are reproduced
on a CPU: which buckets come up depends on how the HTTP requests arrive, so they vary between runs.

With eager_ms > 0 it also pays for prefix-cache hits as the real engine does with prefill graphs: a
step that admits a request whose leading prompt blocks are cached (the real BlockManager decides, with
the engine's min_prefix_hit rule) runs eagerly on the GPU, which costs eager_ms more (H100, 0.5B: one
eager step of 8 decodes + a 128-token prompt 24.0 ms, the same step from graphs 6.4 ms: CHANGELOG,
split step). Chat prompts share their template's first block, so this is what chat rounds hit (issue 19).

Used by fake_serve.py (`orcd serve` with this engine) and serving_fake.py (HTTP ÷ engine on the CPU).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from orcd.engine.block_manager import BlockManager
from orcd.engine.io import EngineRequest, TokenEvent
from orcd.engine.llm_engine import SHORT_PREFIX_TOKENS
from orcd.engine.sequence import Sequence
from orcd.runner.prefill_graphs import SEQ_BUCKETS, TOKEN_BUCKETS, capture_plan


@dataclass(frozen=True)
class FakeBuild:
    """Picklable like EngineBuild (it crosses to the spawned engine process); build() -> FakeEngine."""

    path: Path  # the GGUF whose header (config, tokenizer) the API process reads; its weights are unused
    base_ms: float = 0.95  # step time = base_ms + row_ms * rows + prefill_ms * prefill tokens
    row_ms: float = 0.057
    prefill_ms: float = 0.01
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    text: str = " tok"  # every token's text
    capture_ms: float = 0.0  # a prefill graph bucket's first use costs this much more (0: no graphs)
    warm_graphs: bool = True  # with capture_ms: every bucket paid for at build, none while serving
    eager_ms: float = 0.0  # a step admitting a prefix-cache hit costs this much more (0: no prefix cache)
    min_prefix_hit: int = SHORT_PREFIX_TOKENS  # the engine's rule: shorter cached prefixes are recomputed

    def build(self) -> FakeEngine:
        return FakeEngine(self)

    def step_s(self, rows: int, prefill_tokens: int) -> float:
        return (self.base_ms + self.row_ms * rows + self.prefill_ms * prefill_tokens) / 1000



def prefix_rule(min_prefix_hit: int | None) -> dict:
    """FakeBuild's min_prefix_hit argument: None keeps the engine's default."""
    return {} if min_prefix_hit is None else {"min_prefix_hit": min_prefix_hit}


class PrefixCache:
    """The real BlockManager over the fake's prompts (16-token blocks, no decode KV): says which
    admissions take cached blocks. Blocks register after the step that computed them, as in the engine."""

    def __init__(self, max_num_seqs: int, min_prefix_hit: int):
        self.bm = BlockManager(max_num_seqs * 512, 16, min_prefix_hit=min_prefix_hit)
        self.seqs: dict[str, Sequence] = {}
        self.pending: list[Sequence] = []  # admitted this step: computed (and cached) after it

    def admit(self, req: EngineRequest) -> int:
        """-> the prompt tokens taken from the cache (0: a fresh prompt)."""
        seq = Sequence(req.request_id, req.prompt_token_ids, req.sampling)
        self.bm.take_prefix(seq)
        if not self.bm.append_slots(seq, seq.num_tokens - seq.num_computed):
            raise RuntimeError("fake engine: prefix pool full")
        self.bm.count_admission(seq)
        self.seqs[req.request_id] = seq
        self.pending.append(seq)
        return seq.num_cached_tokens

    def computed(self) -> None:
        for seq in self.pending:
            seq.num_computed = seq.num_tokens
            self.bm.cache_full_blocks(seq)
        self.pending = []

    def free(self, request_id: str) -> None:
        seq = self.seqs.pop(request_id, None)
        if seq is not None:
            self.pending = [s for s in self.pending if s is not seq]
            self.bm.free_seq(seq)


def engine_alone(build: FakeBuild, streams: int, prompt_len: int, gen_len: int) -> float:
    """End-to-end tok/s of the fake engine alone (all requests added at once, stepped to the end), as
    batching_engine.py measures LLMEngine."""
    from orcd.engine.sampling_params import SamplingParams

    engine, t0, tokens = build.build(), time.perf_counter(), 0
    for i in range(streams):
        engine.add_validated(EngineRequest(str(i), [1] * prompt_len, SamplingParams(max_tokens=gen_len)))
    while engine.has_work():
        tokens += sum(e.token_id is not None for e in engine.step())
    return tokens / (time.perf_counter() - t0)


class FakeEngine:
    """The LLMEngine surface that EngineCore uses: add_validated, abort, abort_all, has_work, step,
    stats, grammars, loaded.device, kv_capacity_tokens."""

    def __init__(self, build: FakeBuild):
        self.build = build
        self.loaded = SimpleNamespace(device="cpu")
        self.kv_capacity_tokens = 1 << 20
        self.waiting: deque[EngineRequest] = deque()
        self.running: dict[str, list] = {}  # request id -> [request, tokens generated, arrival time]
        self.aborts: set[str] = set()
        self.counters = {"steps": 0, "generation_tokens": 0, "requests_finished": 0, "lazy_captures": 0,
                         "eager_steps": 0}
        self.captured: set[tuple[int, int]] = set()  # prefill graph buckets paid for
        if build.capture_ms and build.warm_graphs:
            self.captured = set(capture_plan(TOKEN_BUCKETS, SEQ_BUCKETS, build.max_num_batched_tokens))
            time.sleep(len(self.captured) * build.capture_ms / 1000)
        self.prefix = PrefixCache(build.max_num_seqs, build.min_prefix_hit) if build.eager_ms else None

    def capture_s(self, fresh: list[int]) -> float:
        """Seconds of a lazy capture for a step whose fresh prompts have these lengths (0.0: none)."""
        tb = next((t for t in TOKEN_BUCKETS if t >= sum(fresh)), None)
        sb = next((n for n in SEQ_BUCKETS if n >= len(fresh)), None)
        if not self.build.capture_ms or not fresh or tb is None or sb is None or (tb, sb) in self.captured:
            return 0.0  # no graphs, no prompt, eager (too many tokens or sequences), or captured already
        self.captured.add((tb, sb))
        self.counters["lazy_captures"] += 1
        print(f"fake engine: lazy prefill graph capture {tb}x{sb} (#{self.counters['lazy_captures']})",
              file=sys.stderr, flush=True)
        return self.build.capture_ms / 1000

    def add_validated(self, req: EngineRequest) -> None:
        self.waiting.append(req)

    def abort(self, request_id: str, reason: str = "cancelled") -> bool:
        self.aborts.add(request_id)
        return True

    def abort_all(self, reason: str = "cancelled", error: str | None = None) -> list[TokenEvent]:
        ids = [r.request_id for r in self.waiting] + list(self.running)
        for rid in self.running if self.prefix else ():
            self.prefix.free(rid)
        self.waiting.clear()
        self.running.clear()
        return [TokenEvent(rid, None, "", 0, finished=True, finish_reason=reason, error=error) for rid in ids]

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def grammars(self):
        return None

    def step(self) -> list[TokenEvent]:
        events = self._apply_aborts()
        budget, fresh, eager = self.build.max_num_batched_tokens, [], False
        while self.waiting and len(self.running) < self.build.max_num_seqs:
            n = len(self.waiting[0].prompt_token_ids)
            if fresh and n > budget:
                break
            req = self.waiting.popleft()
            self.running[req.request_id] = [req, 0, time.monotonic()]
            budget, fresh = budget - n, fresh + [n]
            eager = bool(self.prefix and self.prefix.admit(req)) or eager  # a cached prefix: no graph
        if not self.running:
            return events
        extra = self.build.eager_ms / 1000 if eager else self.capture_s(fresh)
        time.sleep(self.build.step_s(len(self.running), sum(fresh)) + extra)
        self.counters["steps"] += 1
        self.counters["eager_steps"] += eager
        if self.prefix:
            self.prefix.computed()
        for rid, state in list(self.running.items()):
            req, done = state[0], state[1] + 1
            state[1] = done
            last = done >= req.sampling.max_tokens
            events.append(TokenEvent(rid, 100 + done % 1000, self.build.text, done - 1, finished=last,
                                     finish_reason="length" if last else None,
                                     prompt_tokens=len(req.prompt_token_ids), generated_tokens=done,
                                     queue_s=0.0 if done == 1 else None))
            if last:
                del self.running[rid]
                if self.prefix:
                    self.prefix.free(rid)
                self.counters["requests_finished"] += 1
        self.counters["generation_tokens"] += len(events)
        return events

    def _apply_aborts(self) -> list[TokenEvent]:
        events = []
        for rid in self.aborts:
            if self.prefix:
                self.prefix.free(rid)
            if self.running.pop(rid, None) is not None:
                events.append(TokenEvent(rid, None, "", 0, finished=True, finish_reason="cancelled"))
        for req in [r for r in self.waiting if r.request_id in self.aborts]:
            self.waiting.remove(req)
            events.append(TokenEvent(req.request_id, None, "", 0, finished=True, finish_reason="cancelled"))
        self.aborts.clear()
        return events

    def stats(self) -> dict:
        return {"kv_capacity_tokens": self.kv_capacity_tokens, "kv_blocks_total": 1, "kv_blocks_used": 0,
                "kv_block_size": 16, "kv_usage": 0.0, "running": len(self.running),
                "waiting": len(self.waiting), "max_num_seqs": self.build.max_num_seqs,
                "max_num_batched_tokens": self.build.max_num_batched_tokens, **self.counters,
                **({"prefix_cache_hits": self.prefix.bm.prefix_hits,
                    "prefix_cache_recomputed": self.prefix.bm.prefix_skipped} if self.prefix else {}),
                "time": time.time()}
