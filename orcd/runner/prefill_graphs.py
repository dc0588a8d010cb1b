"""CUDA graphs of fresh-prompt prefill steps: one graph per (token bucket, sequence bucket).

`capture_all` captures every bucket a step can come up in (`capture_plan`) at engine start (LLMEngine's
warm-up); a bucket missing then (capture_all not called) is captured the first time a step needs it, which
costs that step ~0.1 s (H100, 0.5B): which buckets come up depends on how requests arrive, so lazy
captures landed inside measured serving rounds.

An eager prefill step of a small model is host-bound (~1,300 torch ops + ~170 Triton launches, ~25 ms
of Python for ~5 ms of GPU work on a 512-token Qwen2.5-0.5B prompt); replaying model.forward from a
CUDA graph removes that. ModelRunner uses it (CUDA, triton, fp16/bf16, varlen flash attention on, not
enforce_eager) for steps where every sequence starts at position 0 (num_computed == 0: fresh prompts, or
the first chunk of a long one; no prefix-cache hit), the tokens fit the largest token bucket and the
sequences the largest sequence bucket. Everything else runs eagerly.

Padded layout of a step with n sequences and T tokens in bucket (tb, sb), n <= sb, T <= tb:
- rows 0..T-1 are the sequences' tokens, flattened; rows T..tb-1 are padding (token 0, position 0)
  whose K/V go to the scratch block (a KV block past the block manager's pool that no sequence owns,
  see decode_graphs) and are never read by a real row;
- sb + 1 attention sequences: the n real ones, sb - n empty ones (length 0), then the padding rows as
  one dummy sequence: cu_seqlens [sb + 2] = [0, c1, .., cn, T, .., T, tb];
- sample rows [sb]: row k is the last row of the k-th sampling sequence, the rest point at row tb - 1.
The captured attention path is attention_triton._prefill_varlen with no prefix: flash-attention varlen
over this step's K/V (gathered by slot_mapping) with device cu_seqlens and max_seqlen = tb (host), so a
graph replays any layout of its bucket. Host lists in the captured AttnMetadata only decide "no prefix".
Block tables are not read on that path: captured metadata gets a scratch-filled placeholder.
Host inputs go through pinned buffers and one non-blocking copy per static device buffer; before they
are rewritten, the previous step's copies are waited for (a step that samples nothing never syncs).
Graphs share one memory pool; a graph's static outputs are read (sampled) before the next step replays.

Without capture (CPU tests: capture=False) `run` executes the same padded step eagerly on the static
buffers, with real block tables (the torch attention reference reads them), so the padding logic is
tested without a GPU.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from orcd.engine.io import ScheduledSeq
from orcd.models.layers.attention import AttnMetadata
from orcd.numerics import batch_invariant_mode, invariant_layers
from orcd.runner.decode_graphs import host_buffer
from orcd.runner.sampler import pick_tokens, sample_rows

log = logging.getLogger(__name__)

TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048)
SEQ_BUCKETS = (1, 4, 16)  # <= 4 sampled rows: the LM head is a quantized GEMV; more: dequantize + GEMM


def pick_bucket(seqs: list[ScheduledSeq], token_buckets: tuple[int, ...],
                seq_buckets: tuple[int, ...]) -> tuple[int, int] | None:
    """(tb, sb): the smallest buckets holding the step, or None when it is not a fresh-prompt step that
    fits (a cached prefix, a decode row, too many tokens or sequences)."""
    if not seqs or any(s.num_computed for s in seqs):
        return None
    total = sum(len(s.token_ids) for s in seqs)
    tb = next((b for b in token_buckets if b >= total), None)
    sb = next((b for b in seq_buckets if b >= len(seqs)), None)
    return None if tb is None or sb is None else (tb, sb)


def capture_plan(token_buckets: tuple[int, ...], seq_buckets: tuple[int, ...],
                 max_tokens: int) -> list[tuple[int, int]]:
    """Every (tb, sb) a step of at most `max_tokens` tokens (the scheduler's max_num_batched_tokens) can
    pick, largest first (the first capture sizes the shared pool). Token buckets above the first one that
    holds max_tokens never come up; any sequence bucket can come up with any token bucket (short prompts)."""
    tbs = sorted(token_buckets)
    top = next((b for b in tbs if b >= max_tokens), tbs[-1])
    return [(tb, sb) for tb in reversed(tbs) if tb <= top for sb in sorted(seq_buckets, reverse=True)]


def fill_prefill_inputs(seqs: list[ScheduledSeq], tb: int, sb: int, block_size: int, scratch_block: int,
                        rows64: np.ndarray, cu32: np.ndarray, samp64: np.ndarray
                        ) -> tuple[list[int], list[int], list[int]]:
    """Write the padded layout (module docstring) into host arrays: rows64 [3, >= tb] int64 = ids,
    positions, slots; cu32 [2, >= sb + 2] int32 = cu_seqlens, per-sequence lengths (sb + 1 of them);
    samp64 [>= sb] int64 sample rows. -> (cu_seqlens, lengths, indices of the sampling seqs) as host lists.
    Requires every num_computed == 0 and sum of lengths <= tb, len(seqs) <= sb."""
    cu = [0]
    sampled: list[int] = []
    samp64[:sb] = tb - 1
    for i, s in enumerate(seqs):
        c, n = cu[-1], len(s.token_ids)
        p = np.arange(n, dtype=np.int64)  # positions 0..n-1: no cached context
        rows64[0, c:c + n] = s.token_ids
        rows64[1, c:c + n] = p
        table = np.asarray(s.block_table[: -(-n // block_size)], dtype=np.int64)
        rows64[2, c:c + n] = table[p // block_size] * block_size + p % block_size
        cu.append(c + n)
        if s.sample:
            samp64[len(sampled)] = c + n - 1
            sampled.append(i)
    total = cu[-1]
    pad = tb - total
    rows64[0:2, total:tb] = 0
    rows64[2, total:tb] = scratch_block * block_size + np.arange(pad, dtype=np.int64) % block_size
    cu += [total] * (sb - len(seqs)) + [tb]
    lens = [cu[i + 1] - cu[i] for i in range(sb + 1)]
    cu32[0, : sb + 2] = cu
    cu32[1, : sb + 1] = lens
    return cu, lens, sampled


def padded_block_tables(seqs: list[ScheduledSeq], sb: int, pad_rows: int, block_size: int,
                        scratch_block: int) -> torch.Tensor:
    """[sb + 1, W] int32 block tables of the padded layout (eager path only: the torch attention reads
    them; the captured varlen path does not): real tables, then scratch-filled rows."""
    width = max([len(s.block_table) for s in seqs] + [-(-pad_rows // block_size), 1])
    t = torch.full((sb + 1, width), scratch_block, dtype=torch.int32)
    for i, s in enumerate(seqs):
        t[i, : len(s.block_table)] = torch.tensor(s.block_table, dtype=torch.int32)
    return t


class PrefillGraphs:
    def __init__(self, model: torch.nn.Module, kv, block_size: int, scratch_block: int,
                 max_num_seqs: int = 16, token_buckets: tuple[int, ...] = TOKEN_BUCKETS,
                 seq_buckets: tuple[int, ...] = SEQ_BUCKETS, capture: bool = True, strict: bool = False):
        """kv: the runner's KVCache with scratch_block < kv.num_blocks owned by no sequence.
        capture=False: run the padded step eagerly (CPU tests). strict: a failed capture raises instead of
        turning the graphs off (tensor parallel: a rank that went eager alone would leave the others'
        collectives unpaired; tp_runner.py)."""
        self.model, self.kv, self.block_size, self.scratch_block = model, kv, block_size, scratch_block
        self.layers = invariant_layers(model)  # set to the fast kernels for every step run here (_step)
        self.token_buckets = tuple(sorted(token_buckets))
        below = [b for b in sorted(seq_buckets) if b < max_num_seqs]
        self.seq_buckets = tuple(below + [b for b in sorted(seq_buckets) if b >= max_num_seqs][:1])
        self.capture = capture
        dev = kv.k[0].device
        tmax, smax = self.token_buckets[-1], self.seq_buckets[-1]
        pin = capture and dev.type == "cuda"
        self.h64 = host_buffer(torch.zeros((3, tmax), dtype=torch.int64), pin)  # ids, positions, slots
        self.h32 = host_buffer(torch.zeros((2, smax + 2), dtype=torch.int32), pin)  # cu_seqlens, lengths
        self.hsamp = host_buffer(torch.zeros(smax, dtype=torch.int64), pin)
        self.d64 = torch.zeros((3, tmax), dtype=torch.int64, device=dev)
        self.d32 = torch.zeros((2, smax + 2), dtype=torch.int32, device=dev)
        self.dsamp = torch.zeros(smax, dtype=torch.int64, device=dev)
        self.tables = torch.full((smax + 1, 1), scratch_block, dtype=torch.int32, device=dev)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # static logits, greedy
        self.failed = False  # a capture failed: every later step runs eagerly
        self.strict = strict
        self.sealed = False  # seal(): no capture after it; a bucket not captured then runs eagerly
        self.pool = None
        self.capture_seconds = 0.0
        self.replays = 0
        self.warm_seconds = 0.0  # capture_all's wall time (captures, or eager runs without capture)
        self._copied: torch.cuda.Event | None = None  # recorded after the last step's host -> device copies

    def bucket(self, seqs: list[ScheduledSeq]) -> tuple[int, int] | None:
        if self.failed:
            return None
        key = pick_bucket(seqs, self.token_buckets, self.seq_buckets)
        return None if self.sealed and key not in self.graphs else key

    def seal(self) -> None:
        """Capture nothing from now on (tensor parallel: every rank captured the same buckets together at
        start, and a capture inside a step on one rank only would leave collectives unpaired)."""
        self.sealed = True

    def capture_all(self, max_tokens: int) -> list[tuple[int, int]]:
        """Capture every bucket of capture_plan not captured yet (engine start, so no request pays for
        one); returns the buckets run. Each runs an all-padding step (no sequence: every row writes the
        scratch block). Without capture (CPU tests) the same steps run eagerly. Stops at a failure
        (prefill graphs are then off: `failed`). Sealed: nothing is run; returns the buckets captured."""
        if self.sealed:
            return list(self.graphs)
        t0, done = time.perf_counter(), []
        for key in capture_plan(self.token_buckets, self.seq_buckets, max_tokens):
            if key in self.graphs:
                continue
            if self.failed or self.forward([], key) is None:
                break
            done.append(key)
        self.warm_seconds += time.perf_counter() - t0
        return done

    def _meta(self, tb: int, sb: int, cu: list[int], lens: list[int], tables: torch.Tensor | None):
        return AttnMetadata(
            cu_seqlens_q=self.d32[0, : sb + 2], seq_lens=self.d32[1, : sb + 1],
            block_tables=self.tables[: sb + 1] if tables is None else tables,
            slot_mapping=self.d64[2, :tb], max_query_len=tb, max_seq_len=tb,
            cu_seqlens_q_host=cu, seq_lens_host=lens)

    def _step(self, tb: int, sb: int, meta: AttnMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        # The fast kernels whatever the model's layers were left at (another engine on the same model, or
        # this one's last step, may have left them batch-invariant): the invariant attention builds a
        # prefill step's tile lists on the host, which a captured graph would re-read from freed memory.
        with batch_invariant_mode(self.layers, False):
            hidden = self.model(self.d64[0, :tb], self.d64[1, :tb], meta, self.kv)
            logits = self.model.compute_logits(hidden.index_select(0, self.dsamp[:sb]))  # [sb, V] float32
        return logits, logits.argmax(dim=-1)

    def run(self, seqs: list[ScheduledSeq], key: tuple[int, int]
            ) -> tuple[list[int], list[ScheduledSeq]] | None:
        """One step in bucket `key` (from bucket()) -> (sampled tokens, the sequences they belong to), or
        None when the graph could not be captured (the caller then runs the step eagerly)."""
        out = self.forward(seqs, key)
        return None if out is None else _pick(seqs, *out)

    @torch.inference_mode()
    def forward(self, seqs: list[ScheduledSeq], key: tuple[int, int]
                ) -> tuple[list[int], torch.Tensor, torch.Tensor] | None:
        """-> (indices of the sampling seqs, logits [sb, V] float32, greedy [sb]): row k belongs to
        seqs[indices[k]]; with graphs, views of static buffers valid until the next call. None: no graph."""
        tb, sb = key
        if self._copied is not None:  # a step that sampled nothing never synced: its copies may be queued
            self._copied.synchronize()
        cu, lens, idx = fill_prefill_inputs(seqs, tb, sb, self.block_size, self.scratch_block,
                                            self.h64.numpy(), self.h32.numpy(), self.hsamp.numpy())
        self.d64[:, :tb].copy_(self.h64[:, :tb], non_blocking=True)
        self.d32.copy_(self.h32, non_blocking=True)
        self.dsamp[:sb].copy_(self.hsamp[:sb], non_blocking=True)
        if self.h64.is_pinned():
            self._copied = torch.cuda.Event()
            self._copied.record()
        if not self.capture:
            tables = padded_block_tables(seqs, sb, tb - cu[-2], self.block_size, self.scratch_block)
            logits, greedy = self._step(tb, sb, self._meta(tb, sb, cu, lens, tables.to(self.d64.device)))
        elif key in self.graphs:
            self.graphs[key].replay()
            self.replays += 1
            logits, greedy = self.outputs[key]
        else:
            out = self._capture(key, self._meta(tb, sb, cu, lens, None))
            if out is None:
                return None
            logits, greedy = out
        return idx, logits, greedy

    def _capture(self, key: tuple[int, int], meta: AttnMetadata) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Warm-up (this step's real result, returned), then capture into the shared pool. Any failure
        (e.g. out of memory): log it, turn prefill graphs off, None."""
        tb, sb = key
        t0 = time.perf_counter()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self._step(tb, sb, meta)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            meta.cache = None  # the warm-up's memo holds the same buffer views; start clean anyway
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self.outputs[key] = self._step(tb, sb, meta)
            self.pool = g.pool()
            self.graphs[key] = g
        except Exception as err:  # noqa: BLE001 - any capture failure: eager from now on
            if self.strict:
                raise
            log.warning("prefill CUDA graph capture failed, prefilling eagerly: %s", str(err).splitlines()[0])
            self.failed = True
            self.outputs.pop(key, None)
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except (RuntimeError, AssertionError):  # AssertionError: torch built without CUDA
                pass
            return None
        dt = time.perf_counter() - t0
        self.capture_seconds += dt
        log.info("captured prefill CUDA graph for %d tokens x %d sequences in %.3f s", tb, sb, dt)
        return out


def _pick(seqs: list[ScheduledSeq], idx: list[int], logits: torch.Tensor, greedy: torch.Tensor
          ) -> tuple[list[int], list[ScheduledSeq]]:
    """Tokens for the sampling sequences seqs[idx] from rows 0..len(idx)-1 of logits / greedy."""
    to_sample = [seqs[i] for i in idx]
    if not to_sample:
        return [], []
    k = len(to_sample)
    return pick_tokens(logits[:k], greedy[:k], sample_rows(to_sample)).tolist(), to_sample
