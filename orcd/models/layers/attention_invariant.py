"""Batch-invariant paged attention (Triton): one kernel for prefill, chunked prefill and decode rows.

`paged_attention_invariant(q [T, Hq, D], k_cache, v_cache, meta, scale, window=0) -> [T, Hq, D]`, the backend
attention.paged_attention uses on CUDA for layers in batch-invariant mode (orcd.numerics).

A program owns a tile of up to BQ consecutive query rows of one sequence and one query head. Each row at
position p reduces over keys 0..p in BN-token blocks starting at position 0 (online softmax, fp32), never
split. A row's result therefore depends on its own query and keys only: not on how many rows share its
tile or the step, nor on whether its sequence is in prefill or decode. Blocks past a row's position are
fully masked for it and leave its running max, sum and accumulator bit-for-bit unchanged (it has seen
key 0 in the first block, so its max is finite: alpha = 1, p = 0), so a tile running further for its
other rows does not disturb it.

Tiles are listed by (sequence, first row) arrays built on the host from the step's row offsets; a
decode-only step (one row per sequence) uses tile i = sequence i = row i, built on the device, so the
call is capturable in a CUDA graph (grid = (B, Hq)).

Sliding window (window > 0): a row at position p sees keys p - window + 1 .. p. A tile starts at the
BN-aligned block holding its first row's first visible key, so every row still reduces over the same
BN-aligned blocks wherever its tile starts; the blocks before a row's own first key are fully masked
and leave its state (max -inf, sum 0, accumulator 0) unchanged, the max taken as 0 while it is -inf.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orcd.models.layers.attention_ref import AttnMetadata

BQ = 16  # query rows per tile
BN = 64  # keys per inner block


@triton.jit
def _inv_attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, bt_ptr, sl_ptr, cu_ptr, tseq_ptr, trow_ptr, scale, window,
                     s_qt, s_qh, s_ot, s_oh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt,
                     GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BQ: tl.constexpr,
                     BN: tl.constexpr, IEEE: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    b = tl.load(tseq_ptr + tile)
    r0 = tl.load(trow_ptr + tile)
    q0 = tl.load(cu_ptr + b)
    q1 = tl.load(cu_ptr + b + 1)
    ctx = tl.load(sl_ptr + b)  # tokens in the cache after this step
    rows = r0 + tl.arange(0, BQ)
    rmask = rows < q1
    qpos = tl.where(rmask, ctx - (q1 - q0) + (rows - q0), 0)  # each row's position (padding: 0)
    kv_end = ctx - (q1 - q0) + (tl.minimum(r0 + BQ, q1) - q0)  # keys the tile's last row sees
    first = ctx - (q1 - q0) + (r0 - q0)  # the tile's first row's position
    kv_lo = tl.where(window > 0, tl.maximum(first - window + 1, 0) // BN * BN, 0)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + rows.to(tl.int64)[:, None] * s_qt + h * s_qh + d[None, :], mask=rmask[:, None],
                other=0.0)
    m_i = tl.full([BQ], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BQ], dtype=tl.float32)
    acc = tl.zeros([BQ, D], dtype=tl.float32)
    for t0 in range(kv_lo, kv_end, BN):
        toks = t0 + tl.arange(0, BN)
        tmask = toks < kv_end
        page = tl.load(bt_ptr + b * s_bt + toks // PAGE, mask=tmask, other=0).to(tl.int64)
        k = tl.load(k_ptr + (page * s_kb + (toks % PAGE) * s_ks + kvh * s_kh)[:, None] + d[None, :],
                    mask=tmask[:, None], other=0.0)  # [BN, D]
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        seen = (toks[None, :] <= qpos[:, None]) & ((window == 0) | (toks[None, :] > qpos[:, None] - window))
        s = tl.where(seen, s * scale, float("-inf"))  # causal (and windowed), [BQ, BN] fp32
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet stays empty
        p = tl.exp(s - m_use[:, None])
        alpha = tl.exp(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + (page * s_vb + (toks % PAGE) * s_vs + kvh * s_vh)[:, None] + d[None, :],
                    mask=tmask[:, None], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + rows.to(tl.int64)[:, None] * s_ot + h * s_oh + d[None, :],
             o.to(o_ptr.dtype.element_ty), mask=rmask[:, None])


def _tiles(meta: AttnMetadata, n_rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(tile -> sequence, tile -> first global row) int32 device tensors; memoized on meta per step."""
    if meta.cache is not None and "inv_tiles" in meta.cache:
        return meta.cache["inv_tiles"]
    n_seqs = meta.seq_lens.shape[0]
    if meta.max_query_len == 1 and n_rows == n_seqs:  # decode: no host data, graph-capturable
        seq = torch.arange(n_seqs, dtype=torch.int32, device=device)
        res = (seq, seq)
    else:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # a graph would replay the copy below from the host list's address, freed by then
            raise RuntimeError("batch-invariant attention over prefill rows cannot be captured in a CUDA "
                               "graph: its tile lists are built on the host for each step")
        cu, _ = meta.host_lists()
        seqs, starts = [], []
        for b in range(len(cu) - 1):
            for r in range(cu[b], cu[b + 1], BQ):
                seqs.append(b)
                starts.append(r)
        res = (torch.tensor(seqs, dtype=torch.int32).to(device, non_blocking=True),
               torch.tensor(starts, dtype=torch.int32).to(device, non_blocking=True))
    if meta.cache is None:
        meta.cache = {}
    meta.cache["inv_tiles"] = res
    return res


def paged_attention_invariant(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              meta: AttnMetadata, scale: float, window: int = 0) -> torch.Tensor:
    """q [T, Hq, D] (this step's K/V already written) -> out [T, Hq, D] in q.dtype; window > 0: each row
    sees only its last `window` positions."""
    t, n_heads, dim = q.shape
    page, n_kv = k_cache.shape[1], k_cache.shape[2]
    if dim & (dim - 1) or dim < 16:
        raise ValueError(f"batch-invariant attention needs a power-of-two head_dim >= 16, got {dim}")
    q = q.to(k_cache.dtype)
    out = torch.empty((t, n_heads, dim), dtype=q.dtype, device=q.device)
    if t == 0:
        return out
    tseq, trow = _tiles(meta, t, q.device)
    _inv_attn_kernel[(tseq.shape[0], n_heads)](
        q, k_cache, v_cache, out, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q, tseq, trow,
        float(scale), int(window), q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3], meta.block_tables.stride(0), GROUP=n_heads // n_kv,
        D=dim, PAGE=page, BQ=BQ, BN=BN, IEEE=q.dtype == torch.float32, num_warps=4)
    return out
