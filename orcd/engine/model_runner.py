"""ModelRunner: SchedulerOutput -> flattened input tensors -> model -> logits of sampled rows -> tokens.

The runner owns the KV cache tensors. Block bookkeeping (which block holds what) is the scheduler's;
the runner trusts each ScheduledSeq's block_table and num_computed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from orcd.engine.io import ModelRunnerOutput, SchedulerOutput
from orcd.engine.kv_cache import KVCache
from orcd.engine.sampler import SampleRow, sample
from orcd.models.layers.attention import AttnMetadata

log = logging.getLogger(__name__)


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    attn: AttnMetadata
    sample_rows: torch.Tensor  # [N] int64: row of hidden whose logits are sampled (last of each chunk)


def prepare_inputs(sched: SchedulerOutput, block_size: int, device: torch.device) -> StepInputs:
    """Flatten every sequence's chunk; build slot_mapping and padded block tables (host, then one copy)."""
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    cu = [0]
    seq_lens: list[int] = []
    sample_rows: list[int] = []
    for s in sched.seqs:
        n = len(s.token_ids)
        ids.extend(s.token_ids)
        for p in range(s.num_computed, s.num_computed + n):
            pos.append(p)
            slots.append(s.block_table[p // block_size] * block_size + p % block_size)
        cu.append(cu[-1] + n)
        seq_lens.append(s.num_computed + n)
        if s.sample:
            sample_rows.append(cu[-1] - 1)
    width = max(len(s.block_table) for s in sched.seqs)
    tables = [s.block_table + [0] * (width - len(s.block_table)) for s in sched.seqs]

    def t(x: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(x, dtype=dtype).to(device, non_blocking=True)

    attn = AttnMetadata(
        cu_seqlens_q=t(cu, torch.int32), seq_lens=t(seq_lens, torch.int32),
        block_tables=t(tables, torch.int32), slot_mapping=t(slots, torch.int64),
        max_query_len=max(cu[i + 1] - cu[i] for i in range(len(seq_lens))), max_seq_len=max(seq_lens),
        cu_seqlens_q_host=cu, seq_lens_host=seq_lens,
    )
    return StepInputs(t(ids, torch.int64), t(pos, torch.int64), attn, t(sample_rows, torch.int64))


class ModelRunner:
    def __init__(self, loaded, num_kv_blocks: int, block_size: int):
        self.loaded = loaded
        self.model = loaded.model
        self.device = loaded.device
        self.block_size = block_size
        self.kv = KVCache.allocate(loaded.cfg, num_kv_blocks, block_size, loaded.device, loaded.dtype)

    @torch.inference_mode()
    def forward(self, sched: SchedulerOutput) -> torch.Tensor:
        """Run the model on one step; returns logits [N, V] float32 of the rows with sample=True."""
        return self.run(prepare_inputs(sched, self.block_size, self.device))

    def run(self, inp: StepInputs) -> torch.Tensor:
        """Device work only (no host syncs on the decode path): the hook a CUDA-graph runner replaces."""
        hidden = self.model(inp.input_ids, inp.positions, inp.attn, self.kv)
        return self.model.compute_logits(hidden[inp.sample_rows])

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        if sched.empty:
            return ModelRunnerOutput(sampled={})
        try:
            logits = self.forward(sched)
            to_sample = [s for s in sched.seqs if s.sample]
            if not to_sample:
                return ModelRunnerOutput(sampled={})
            rows = [SampleRow(s.sampling, s.penalty_token_ids, s.num_generated) for s in to_sample]
            with torch.inference_mode():
                tokens = sample(logits, rows).tolist()
        except (RuntimeError, torch.cuda.OutOfMemoryError) as err:  # a failed step fails its sequences
            log.exception("model step failed")
            msg = f"model step failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            return ModelRunnerOutput(sampled={}, failed={s.seq_id: msg for s in sched.seqs})
        return ModelRunnerOutput(sampled={s.seq_id: tok for s, tok in zip(to_sample, tokens, strict=True)})
