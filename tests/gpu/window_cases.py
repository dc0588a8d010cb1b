"""Sliding-window attention checks of the Triton paths, shared by the CUDA test and the CPU interpreter
run: each yields (name, rel_err vs the float64 torch reference with the same window, tolerance, rows
bit-identical when computed in other batches)."""

from __future__ import annotations

import torch
from gpu_blocks import rel_err
from invariant_cases import TOL, _paged, _to_cpu

from orcd.models.layers.attention_invariant import paged_attention_invariant
from orcd.models.layers.attention_ref import AttnMetadata, paged_attention_torch
from orcd.models.layers.attention_triton import paged_attention, paged_decode_attention

MIXED = [(40, 40), (100, 37), (5, 1), (130, 130), (77, 1)]  # (tokens in cache after the step, new rows)


def _ref(q, kc, vc, meta, window):
    return paged_attention_torch(q.double().cpu(), kc.double().cpu(), vc.double().cpu(), _to_cpu(meta), 0.17,
                                 window)


def decode_checks(device: str, dtypes: tuple[torch.dtype, ...]):
    """The split-K decode kernel: contexts shorter and longer than the window, 1 / 4 / default splits."""
    seqs = [(5, 1), (40, 1), (130, 1), (200, 1)]
    for dtype in dtypes:
        q, kc, vc, meta = _paged(seqs, device, dtype, seed=1)
        for window in (16, 37):
            ref = _ref(q, kc, vc, meta, window)
            for splits in (1, 4, None):
                out = paged_decode_attention(q, kc, vc, meta.block_tables, meta.seq_lens, 0.17, splits,
                                             window)
                yield f"decode-w{window}-s{splits}-{dtype}", rel_err(out, ref), TOL[dtype], True


def invariant_checks(device: str, dtypes: tuple[torch.dtype, ...], window: int = 24):
    """The batch-invariant kernel on a mixed step; each sequence's last row equals the same row computed
    alone as a decode step, and rows 10..19 of sequence 1 equal the same rows computed as a chunk."""
    for dtype in dtypes:
        q, kc, vc, meta = _paged(MIXED, device, dtype)
        out = paged_attention_invariant(q, kc, vc, meta, 0.17, window)
        same = True
        for b, (ctx, _) in enumerate(MIXED):
            row = meta.cu_seqlens_q_host[b + 1] - 1
            one = AttnMetadata(torch.tensor([0, 1], dtype=torch.int32, device=device), meta.seq_lens[b:b + 1],
                               meta.block_tables[b:b + 1], meta.slot_mapping[:1], 1, ctx, [0, 1], [ctx])
            same &= torch.equal(paged_attention_invariant(q[row:row + 1], kc, vc, one, 0.17, window),
                                out[row:row + 1])
        r0 = meta.cu_seqlens_q_host[1] + 10  # positions 73..82: the cache after that chunk holds 83
        part = AttnMetadata(torch.tensor([0, 10], dtype=torch.int32, device=device),
                            torch.tensor([83], dtype=torch.int32, device=device), meta.block_tables[1:2],
                            meta.slot_mapping[:10], 10, 83, [0, 10], [83])
        same &= torch.equal(paged_attention_invariant(q[r0:r0 + 10], kc, vc, part, 0.17, window),
                            out[r0:r0 + 10])
        yield f"invariant-w{window}-{dtype}", rel_err(out, _ref(q, kc, vc, meta, window)), TOL[dtype], same


def backend_checks(device: str, dtypes: tuple[torch.dtype, ...], window: int = 24):
    """attention_triton.paged_attention on a mixed step (fp16/bf16: the varlen flash call with its local
    window; fp32: the torch reference) and on a decode-only step (the split-K kernel)."""
    for dtype in dtypes:
        for name, seqs in (("mixed", MIXED), ("decode", [(c, 1) for c, _ in MIXED])):
            q, kc, vc, meta = _paged(seqs, device, dtype, seed=2)
            out = paged_attention(q, kc, vc, meta, 0.17, window)
            err = rel_err(out, _ref(q, kc, vc, meta, window))
            yield f"backend-{name}-w{window}-{dtype}", err, TOL[dtype], True
