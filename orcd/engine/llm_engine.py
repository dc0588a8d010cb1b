"""The step loop: schedule -> execute -> update -> detokenize, one call to step() at a time; decode steps
overlap the host's work on one with the device's on the next (orcd/engine/overlap.py).

Not thread-safe: one thread drives it (AsyncEngine's background thread, or a CLI loop).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from orcd.engine.block_manager import BlockManager, releasable_window
from orcd.engine.io import EngineRequest, FinishReason, ModelRunnerOutput, SchedulerOutput, TokenEvent
from orcd.engine.output import RequestOutput
from orcd.engine.overlap import OverlapSteps
from orcd.engine.scheduler import Scheduler
from orcd.engine.sequence import Sequence
from orcd.engine.sizing import auto_num_blocks, dense_copies, layer_windows
from orcd.errors import ContextLengthExceededError, RequestError

log = logging.getLogger(__name__)

SEEDED_CACHE_SALT = 0x5EED  # prefix-cache namespace of sequences computed with batch-invariant kernels
SHORT_PREFIX_TOKENS = 64  # with prefill graphs, a cached prefix shorter than this is recomputed (issue 19)


class LLMEngine(OverlapSteps):
    def __init__(
        self,
        loaded,
        kv_fraction: float = 0.7,
        num_kv_blocks: int | None = None,
        block_size: int = 16,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        enable_prefix_caching: bool = True,
        runner=None,
        enforce_eager: bool = False,
        batch_invariant: str | bool = "seeded",
        prefill_graphs: bool = True,
        warm_prefill_graphs: bool = True,
        dense_batch_rows: int | str | None = "auto",
        min_prefix_hit: int | None = None,
        overlap: bool = True,
    ):
        """enforce_eager: never use CUDA graphs (otherwise decode-only steps on CUDA replay captured
        graphs of the fused decode step; they are captured here, see orcd.runner.decode_graphs).
        prefill_graphs: with decode graphs, also replay fresh-prompt steps from prefill graphs.
        warm_prefill_graphs: capture every prefill-graph bucket a step can use here, at start (~0.1 s
        each, H100), instead of inside the first request that needs it (see warm_up_graphs).
        batch_invariant: "seeded" (default): on CUDA, steps that hold a request with a seed run the
        batch-invariant kernels (orcd.numerics), so a seeded request returns the same tokens alone or in any
        batch, and seeded requests share prefix-cache blocks only with each other; "all": every step
        (greedy requests without a seed too); "off": never. The CPU path is invariant in every mode.
        dense_batch_rows (None: off): decode batches of >= that many sequences run on dense copies of the
        weights (orcd.runner.dense_weights), made here before the KV cache is sized from the free memory;
        CUDA decode graphs of the fused step only (OrcdError otherwise, or when they do not fit). "auto"
        (default): sizing.AUTO_DENSE_ROWS where the copies are small beside the device's memory (a 0.5B:
        ~1 GiB), else off (sizing.auto_dense_rows).
        min_prefix_hit (None: SHORT_PREFIX_TOKENS with prefill graphs, else 0): a cached prefix shorter than
        this many tokens is recomputed, so the step can replay a prefill graph (BlockManager.take_prefix).
        overlap: while the device computes a decode step, the host reads the step before's tokens (turns
        them into events) and prepares the next (grammar rows: orcd/engine/overlap.py); prefill steps and
        runners without a launch method run one at a time (tensor parallel has one: TPRunner.launch)."""
        self.loaded = loaded
        self.cfg = loaded.cfg
        self.tokenizer = loaded.tokenizer
        self.block_size = block_size
        # orcd.runner.dense_weights.DenseWeights, or None; made before the runner built below captures
        # the step that reads them
        self.dense = dense_copies(loaded, dense_batch_rows, max_num_seqs, graphs=runner is None
                                  and not enforce_eager and batch_invariant not in ("all", True))
        if num_kv_blocks is None:
            num_kv_blocks = auto_num_blocks(loaded, kv_fraction, block_size)
        self.num_kv_blocks = num_kv_blocks
        self.kv_capacity_tokens = num_kv_blocks * block_size
        # A request must fit the context and, alone, the KV pool (or it would preempt itself forever).
        self.max_model_len = min(self.cfg.context_length, self.kv_capacity_tokens)
        if runner is None:
            from orcd.runner.model_runner import ModelRunner

            # with graphs the runner's KV cache has one more block (the scratch block, id num_kv_blocks)
            # that the block manager below never hands out
            runner = ModelRunner(loaded, num_kv_blocks, block_size, decode_graphs=not enforce_eager,
                                 max_num_seqs=max_num_seqs, max_model_len=self.max_model_len,
                                 batch_invariant=batch_invariant, prefill_graphs=prefill_graphs,
                                 dense=self.dense)
        self.runner = runner
        self.prefill_graph_warmup: dict[str, Any] | None = None  # what warm_up_graphs captured, and when
        if warm_prefill_graphs:
            self.warm_up_graphs(max_num_batched_tokens)
        window = releasable_window(layer_windows(loaded.model))  # > 0 only if every layer is windowed
        if min_prefix_hit is None:
            min_prefix_hit = SHORT_PREFIX_TOKENS if getattr(runner, "prefill_graphs", None) is not None else 0
        self.block_manager = BlockManager(num_kv_blocks, block_size, enable_prefix_caching, window,
                                          min_prefix_hit)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs, max_num_batched_tokens)
        self._requests: dict[str, RequestOutput] = {}
        self._by_seq: dict[int, RequestOutput] = {}
        self._aborts: dict[str, FinishReason] = {}
        self.overlap = overlap
        self._inflight = None  # (SchedulerOutput, orcd.runner.executors.InFlight) launched, not yet read
        self.overlapped_steps = 0  # steps launched before the tokens of the step before were read
        self._grammars = None  # orcd.structured.backend.GrammarBackend, built with the first grammar request
        self._grammars_lock = threading.Lock()
        self.counters = {"prompt_tokens": 0, "generation_tokens": 0, "steps": 0, "step_failures": 0,
                         "requests_finished": 0}

    def warm_up_graphs(self, max_num_batched_tokens: int) -> None:
        """Capture the runner's prefill CUDA graphs for every bucket a step of at most
        max_num_batched_tokens tokens can use (decode graphs are captured by the runner already).
        No prefill graphs (CPU, fp32, enforce_eager, batch-invariant "all"): nothing to do."""
        graphs = getattr(self.runner, "prefill_graphs", None)
        if graphs is None:
            return
        done = graphs.capture_all(max_num_batched_tokens)
        self.prefill_graph_warmup = {"buckets": done, "seconds": graphs.warm_seconds, "failed": graphs.failed}
        log.info("captured %d prefill CUDA graphs (tokens x sequences: %s) in %.2f s%s", len(done),
                 ", ".join(f"{t}x{n}" for t, n in done), graphs.warm_seconds,
                 "; capture failed, prefilling eagerly" if graphs.failed else "")

    # ---- requests ----
    def validate(self, req: EngineRequest) -> None:
        """Raise RequestError / ContextLengthExceededError for a request that cannot run. No side effects."""
        req.sampling.validate()
        if req.sampling.grammar is not None:
            self.grammars().check(req.sampling.grammar)
        n_prompt = len(req.prompt_token_ids)
        if n_prompt == 0:
            raise RequestError("the prompt is empty (no tokens)", param="prompt")
        vocab = int(self.cfg.vocab_size)
        bad = next((t for t in req.prompt_token_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param="prompt")
        total = n_prompt + req.sampling.max_tokens
        ctx = self.cfg.context_length
        if total > ctx:
            raise ContextLengthExceededError(
                f"prompt ({n_prompt} tokens) + max_tokens ({req.sampling.max_tokens}) = {total} tokens "
                f"exceeds the model's context length of {ctx} tokens"
            )
        if total > self.kv_capacity_tokens:
            raise ContextLengthExceededError(
                f"prompt ({n_prompt} tokens) + max_tokens ({req.sampling.max_tokens}) = {total} tokens "
                f"exceeds the KV cache capacity of {self.kv_capacity_tokens} tokens"
            )

    def add_request(self, req: EngineRequest) -> None:
        """Validate (the one place requests are checked), then queue. Raises at once on a bad request."""
        self.validate(req)
        self.add_validated(req)

    def add_validated(self, req: EngineRequest) -> None:
        """Queue a request that validate() accepted (AsyncEngine validates on the caller's thread)."""
        if req.request_id in self._requests:
            raise RequestError(f"request id {req.request_id!r} is already running", param="request_id")
        seq = Sequence(req.request_id, req.prompt_token_ids, req.sampling)
        if req.sampling.grammar is not None:
            seq.matcher = self.grammars().matcher(req.sampling.grammar)
        if req.sampling.seed is not None and getattr(self.runner, "invariant_policy", "off") == "seeded":
            seq.cache_salt = SEEDED_CACHE_SALT  # its blocks hold K/V from the invariant kernels only
        out = RequestOutput(seq, self.tokenizer.detokenizer(skip_special=True), self.tokenizer.eog_ids)
        self._requests[req.request_id] = out
        self._by_seq[seq.seq_id] = out
        self.scheduler.add(seq)
        self.counters["prompt_tokens"] += seq.num_prompt_tokens

    def grammars(self):
        """The structured-output backend of this engine's tokenizer (built once, on first use)."""
        with self._grammars_lock:  # validate() runs on request threads
            if self._grammars is None:
                from orcd.structured.backend import GrammarBackend

                self._grammars = GrammarBackend(self.tokenizer)
            return self._grammars

    def abort(self, request_id: str, reason: FinishReason = "cancelled") -> bool:
        """End a request at the next step (its blocks are freed there). False if it is unknown."""
        if request_id not in self._requests:
            return False
        self._aborts.setdefault(request_id, reason)
        return True

    def abort_all(self, reason: FinishReason = "cancelled", error: str | None = None) -> list[TokenEvent]:
        """End every request now; returns their final events."""
        return [self._finish(out, reason, error=error) for out in list(self._requests.values())]

    def has_work(self) -> bool:
        return bool(self._requests)

    # ---- the step ----
    def step(self) -> list[TokenEvent]:
        events = self._apply_aborts()
        if self._inflight is not None:
            return events + self._step_overlapped(*self._inflight)
        sched = self.scheduler.schedule()
        if sched.empty:
            return events
        self.counters["steps"] += 1
        if self.overlap:
            try:
                if self._launch(sched, None):
                    return events  # its tokens are read by the next step()
            except Exception as err:  # noqa: BLE001 - as _run's failures
                return events + self._apply(sched, self._failed(sched, err))
        return events + self._run(sched)

    def _run(self, sched: SchedulerOutput) -> list[TokenEvent]:
        """One step, synchronously: the runner computes it, then its tokens become events."""
        try:
            result = self.runner.execute(sched)
        except Exception as err:  # noqa: BLE001 - end this step's requests; the engine keeps serving
            result = self._failed(sched, err)
        return self._apply(sched, result)

    def _failed(self, sched: SchedulerOutput, err: Exception) -> ModelRunnerOutput:
        log.error("model step failed for %d sequences", len(sched.seqs), exc_info=err)
        self.counters["step_failures"] += 1
        message = f"{type(err).__name__}: {err}"
        return ModelRunnerOutput(sampled={}, failed={s.seq_id: message for s in sched.seqs})

    def _apply(self, sched: SchedulerOutput, result: ModelRunnerOutput) -> list[TokenEvent]:
        events = []
        for upd in self.scheduler.update(sched, result):
            out = self._by_seq[upd.seq.seq_id]
            if upd.error is not None:
                events.append(self._finish(out, "error", error=upd.error))
            elif upd.new_token is not None:
                event = self._on_token(out, upd.new_token)
                event.logprobs = result.logprobs.get(upd.seq.seq_id)  # None unless the request asked
                events.append(event)
        return events

    def _on_token(self, out: RequestOutput, token_id: int) -> TokenEvent:
        self.counters["generation_tokens"] += 1
        try:
            event = out.on_token(token_id)
        except Exception as err:  # a detokenizer failure ends only this request
            log.exception("output processing failed for %s", out.request_id)
            return self._finish(out, "error", error=f"{type(err).__name__}: {err}")
        if event.finished:
            self._release(out, event.finish_reason)
        return event

    def _finish(self, out: RequestOutput, reason: FinishReason, error: str | None = None) -> TokenEvent:
        try:
            event = out.final(None, reason, error=error)
        except Exception as err:
            event = out._event(None, "", out.seq.num_generated)
            event.finished, event.finish_reason = True, "error"
            event.error = error or f"{type(err).__name__}: {err}"
        self._release(out, event.finish_reason)
        return event

    def _release(self, out: RequestOutput, reason: FinishReason) -> None:
        self.scheduler.finish(out.seq, reason)
        self._requests.pop(out.request_id, None)
        self._by_seq.pop(out.seq.seq_id, None)
        self._aborts.pop(out.request_id, None)
        self.counters["requests_finished"] += 1

    def _apply_aborts(self) -> list[TokenEvent]:
        events = []
        for request_id, reason in list(self._aborts.items()):
            out = self._requests.get(request_id)
            if out is not None:
                events.append(self._finish(out, reason))
        self._aborts.clear()
        return events

    # ---- introspection ----
    @property
    def dense_weights_bytes(self) -> int:
        """Device bytes of the dense weight copies (--dense-batch-rows), 0 when off."""
        return self.dense.nbytes if self.dense is not None else 0

    @property
    def step_copy_bytes(self) -> int:
        """Device bytes of weight copies the fused decode step made for itself (gpt-oss: merged q|k|v)."""
        step = getattr(getattr(self.runner, "graph", None), "step_fn", None)
        return int(getattr(step, "copy_bytes", 0))

    def stats(self) -> dict[str, Any]:
        bm = self.block_manager
        kv = getattr(self.runner, "kv", None)
        loaded_bytes = int(getattr(self.loaded, "weights_bytes", 0))
        return {
            "weights_bytes": loaded_bytes + self.dense_weights_bytes + self.step_copy_bytes,
            "dense_weights_bytes": self.dense_weights_bytes,  # of those, the --dense-batch-rows copies
            "kv_cache_bytes": int(kv.nbytes) if kv is not None else 0,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "kv_blocks_total": bm.num_blocks,
            "kv_blocks_used": bm.num_used_blocks,
            "kv_block_size": self.block_size,
            "kv_usage": bm.num_used_blocks / bm.num_blocks,
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "prefix_cache_hits": bm.prefix_hits,
            "prefix_cache_queries": bm.prefix_queries,
            "prefix_cache_recomputed": bm.prefix_skipped,  # cached tokens under min_prefix_hit, recomputed
            "num_preemptions": self.scheduler.num_preemptions,
            "max_num_seqs": self.scheduler.max_num_seqs,
            "max_num_batched_tokens": self.scheduler.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "batch_invariant": getattr(self.runner, "invariant_policy", "off"),
            **self.counters,
            "time": time.time(),
        }
