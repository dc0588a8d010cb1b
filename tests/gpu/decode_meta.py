"""AttnMetadata for a decode step written by hand in the step tests: one query token per row at
position pos[r], its KV slot from the row's block table (page `page` tokens)."""

from __future__ import annotations

import torch

from orcd.models.layers.attention import AttnMetadata


def decode_meta(pos: torch.Tensor, tables: torch.Tensor, page: int) -> AttnMetadata:
    """pos [B] int64 positions, tables [B, blocks] int32 -> the step's metadata (on pos's device)."""
    b = pos.shape[0]
    slots = tables.gather(1, (pos // page)[:, None].int()).view(-1).long() * page + pos % page
    return AttnMetadata(cu_seqlens_q=torch.arange(b + 1, dtype=torch.int32, device=pos.device),
                        seq_lens=(pos + 1).int(), block_tables=tables, slot_mapping=slots, max_query_len=1,
                        max_seq_len=int(pos.max()) + 1)
