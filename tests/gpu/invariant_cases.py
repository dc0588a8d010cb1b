"""Checks of the batch-invariant kernels, shared by the CUDA test and the CPU interpreter run.

Each check returns (name, rel_err vs a float64 reference, tolerance, rows bit-identical when computed in
other batches); the callers assert on them.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as T
from gpu_blocks import random_blocks, reference, rel_err

from orcd.models.layers.attention import AttnMetadata, paged_attention_torch
from orcd.models.layers.attention_invariant import paged_attention_invariant
from orcd.quant.kernels.invariant_linear import DENSE, invariant_linear

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def linear_checks(device: str, dtypes: tuple[torch.dtype, ...], m_full: int = 70):
    """Every row of an M-row product equals the same row computed in a 1-row, 3-row, shuffled batch."""
    g = torch.Generator().manual_seed(0)
    for qt, in_f in [(T.Q8_0, 96), (T.Q5_0, 320), (T.Q4_K, 512), (T.Q6_K, 256), (None, 200)]:
        raw = random_blocks(qt, 40, in_f, seed=3) if qt else None
        w = torch.randn(40, in_f, generator=g) * 0.05
        for dtype in dtypes:
            x = torch.randn(m_full, in_f, generator=g).to(device, dtype)
            if qt is None:
                wd = w.to(device, dtype)

                def f(a, wd=wd):
                    return invariant_linear(a, wd, DENSE)
                ref = x.cpu().double() @ wd.cpu().double().T
            else:
                rd = raw.to(device)

                def f(a, rd=rd, qt=qt):
                    return invariant_linear(a, rd, int(qt), 40)
                ref = reference(x, raw, qt, 40, in_f)
            full = f(x)
            perm = torch.randperm(m_full, generator=g).to(device)
            same = (torch.equal(f(x[:1]), full[:1]) and torch.equal(f(x[5:8]), full[5:8])
                    and torch.equal(f(x[perm]), full[perm]))
            yield f"linear-{qt.name if qt else 'dense'}-{dtype}", rel_err(full, ref), TOL[dtype], same


def _paged(seqs, device, dtype, hq=4, hkv=2, d=32, page=16, seed=0):
    """seqs: [(tokens in cache after the step, new rows)] -> q, k_cache, v_cache, meta (random tables)."""
    g = torch.Generator().manual_seed(seed)
    width = max(-(-c // page) for c, _ in seqs)
    nblk = len(seqs) * width + 1
    kc = torch.randn(nblk, page, hkv, d, generator=g).to(device, dtype)
    vc = torch.randn(nblk, page, hkv, d, generator=g).to(device, dtype)
    perm = torch.randperm(nblk, generator=g)
    tables = perm[: len(seqs) * width].view(len(seqs), width).to(device, torch.int32)
    cu = [0]
    for _, n in seqs:
        cu.append(cu[-1] + n)
    sl = [c for c, _ in seqs]
    q = torch.randn(cu[-1], hq, d, generator=g).to(device, dtype)
    meta = AttnMetadata(torch.tensor(cu, dtype=torch.int32, device=device),
                        torch.tensor(sl, dtype=torch.int32, device=device), tables,
                        torch.zeros(cu[-1], dtype=torch.int64, device=device), max(n for _, n in seqs),
                        max(sl), cu, sl)
    return q, kc, vc, meta


def attention_checks(device: str, dtypes: tuple[torch.dtype, ...]):
    """Mixed step (prefill, chunk over a cached prefix, decodes) vs the torch reference; each sequence's
    last row equals the same row computed alone as a decode step, and the middle rows of a chunk equal
    the same rows computed as a shorter chunk."""
    seqs = [(40, 40), (100, 37), (5, 1), (130, 130), (77, 1)]
    for dtype in dtypes:
        q, kc, vc, meta = _paged(seqs, device, dtype)
        out = paged_attention_invariant(q, kc, vc, meta, 0.17)
        ref = paged_attention_torch(q.double().cpu(), kc.double().cpu(), vc.double().cpu(),
                                    _to_cpu(meta), 0.17)
        same = True
        for b, (ctx, _) in enumerate(seqs):
            row = meta.cu_seqlens_q_host[b + 1] - 1
            one = AttnMetadata(torch.tensor([0, 1], dtype=torch.int32, device=device), meta.seq_lens[b:b + 1],
                               meta.block_tables[b:b + 1], meta.slot_mapping[:1], 1, ctx, [0, 1], [ctx])
            alone = paged_attention_invariant(q[row:row + 1], kc, vc, one, 0.17)
            same &= torch.equal(alone, out[row:row + 1])
        # rows 10..19 of sequence 1 (positions 73..82) as a 10-row chunk: the cache after it holds 83
        r0 = meta.cu_seqlens_q_host[1] + 10
        part = AttnMetadata(torch.tensor([0, 10], dtype=torch.int32, device=device),
                            torch.tensor([83], dtype=torch.int32, device=device), meta.block_tables[1:2],
                            meta.slot_mapping[:10], 10, 83, [0, 10], [83])
        same &= torch.equal(paged_attention_invariant(q[r0:r0 + 10], kc, vc, part, 0.17), out[r0:r0 + 10])
        yield f"attention-mixed-{dtype}", rel_err(out, ref), TOL[dtype], same


def _to_cpu(meta: AttnMetadata) -> AttnMetadata:
    return AttnMetadata(meta.cu_seqlens_q.cpu(), meta.seq_lens.cpu(), meta.block_tables.cpu(),
                        meta.slot_mapping.cpu(), meta.max_query_len, meta.max_seq_len,
                        meta.cu_seqlens_q_host, meta.seq_lens_host)
