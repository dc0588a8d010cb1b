"""Attention sinks (gpt-oss) in the Triton paths vs the float64 torch reference with the same sinks and
window: the split-K decode kernel (sink in the final normalization, or in the split merge) and, on CUDA,
attention_triton.paged_attention on mixed steps (fp16/bf16: the varlen call corrected by its log-sum-exp).
Each check yields (name, rel_err, tolerance). Run as a script under TRITON_INTERPRET=1 it prints them."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from gpu_blocks import rel_err  # noqa: E402
from invariant_cases import TOL, _paged, _to_cpu  # noqa: E402
from window_cases import MIXED  # noqa: E402

from orcd.models.layers.attention_ref import paged_attention_torch  # noqa: E402
from orcd.models.layers.attention_triton import paged_attention, paged_decode_attention  # noqa: E402

SCALE = 0.17


def _sinks(device: str) -> torch.Tensor:
    return (torch.randn(4, generator=torch.Generator().manual_seed(9)) * 2).to(device)  # [Hq] fp32 logits


def _ref(q, kc, vc, meta, window, sinks):
    return paged_attention_torch(q.double().cpu(), kc.double().cpu(), vc.double().cpu(), _to_cpu(meta), SCALE,
                                 window, sinks.double().cpu())


def _paged_slots(seqs, device, dtype, seed):
    """invariant_cases._paged with slot_mapping filled in (it leaves zeros): the varlen path gathers a
    fresh prompt's K/V by slot_mapping, the slots this step's rows were written to."""
    q, kc, vc, meta = _paged(seqs, device, dtype, seed=seed)
    page, tables, slots = kc.shape[1], meta.block_tables.cpu().long(), []
    for b, (ctx, n) in enumerate(seqs):
        pos = torch.arange(ctx - n, ctx)
        slots.append(tables[b, pos // page] * page + pos % page)
    meta.slot_mapping = torch.cat(slots).to(device)
    return q, kc, vc, meta


def decode_checks(device: str, dtypes: tuple[torch.dtype, ...]):
    seqs = [(5, 1), (40, 1), (130, 1), (200, 1)]
    sinks = _sinks(device)
    for dtype in dtypes:
        q, kc, vc, meta = _paged(seqs, device, dtype, seed=4)
        for window in (0, 37):
            ref = _ref(q, kc, vc, meta, window, sinks)
            for splits in (1, 4):
                out = paged_decode_attention(q, kc, vc, meta.block_tables, meta.seq_lens, SCALE, splits,
                                             window, sinks)
                yield f"sink-decode-w{window}-s{splits}-{dtype}", rel_err(out, ref), TOL[dtype]


def backend_checks(device: str, dtypes: tuple[torch.dtype, ...]):
    sinks = _sinks(device)
    for dtype in dtypes:
        for window in (0, 24):
            for name, seqs in (("mixed", MIXED), ("prompts", [(c, c) for c, _ in MIXED])):
                q, kc, vc, meta = _paged_slots(seqs, device, dtype, seed=5)
                out = paged_attention(q, kc, vc, meta, SCALE, window, sinks)
                yield f"sink-{name}-w{window}-{dtype}", rel_err(out, _ref(q, kc, vc, meta, window, sinks)), \
                    TOL[dtype]


if __name__ == "__main__":
    for name, err, tol in decode_checks("cpu", (torch.float32,)):
        print(f"{name} {err:.3e} {tol}")
