"""Triton paged attention: a split-K (flash-decoding) kernel for one query per sequence.

`paged_decode_attention(q [B, Hq, D], k_cache, v_cache [num_blocks, block_size, Hkv, D], block_tables
[B, max_blocks] int32, seq_lens [B] int32, scale, num_splits=None) -> [B, Hq, D]` in q.dtype.
One program per (sequence, KV head, split): the GROUP = Hq / Hkv query heads sharing a KV head are one
[QB, D] tile (QB = GROUP padded to 16 for tl.dot), so each K/V byte is read once per step. Each split
covers a contiguous chunk of the context; a second small kernel merges the splits by log-sum-exp.
The launch grid depends only on B, Hkv and the block-table width (never on seq_lens values), so the
call can be captured in a CUDA graph and replayed with new seq_lens / block_tables contents.

`paged_attention(q [T, Hq, D], k_cache, v_cache, meta, scale)` is the backend `attention.py` dispatches
to on CUDA: decode-only steps use the kernel; other steps (prefill, chunked prefill over a cached prefix,
mixed prefill + decode) in fp16/bf16 run one varlen flash-attention call per layer over every sequence's
gathered K/V (bottom-right causal: query i of n at position ctx - n + i sees keys 0..ctx - n + i);
fp32 falls back to SDPA per sequence / the torch reference. A layer with a sliding window (window > 0)
sees only its last `window` positions on every path: the decode kernel starts each sequence's range at
seq_len - window, the varlen call passes flash-attention's window_size_left. Attention sinks (gpt-oss:
a learned logit per head in the softmax denominator) join the decode kernel's final normalization (or
the split merge) and scale the varlen call's output by sigmoid(lse - sink).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from orcd.models.layers.attention_ref import AttnMetadata, paged_attention_torch
from orcd.quant.kernels.fused_linear import pdl_enabled
from orcd.quant.kernels.xquant import quantize_x, store_quant32

BLOCK_N = 64  # context tokens per inner iteration


@dataclass(frozen=True)
class SplitLaunch:
    """How the split kernel is launched: context tokens per inner iteration (block_n), warps per program,
    software-pipeline stages of the context loop (None: Triton's default)."""
    block_n: int = BLOCK_N
    num_warps: int = 4
    num_stages: int | None = None

# Both kernels use programmatic dependent launch where pdl_enabled() (Hopper+): each
# launches while the kernel before it finishes and waits (griddepcontrol.wait) before its first read.


@triton.jit
def _decode_split_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, sl_ptr, op_ptr, lse_ptr, out_ptr, sink_ptr, scale,
                         window, s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt,
                         GROUP: tl.constexpr, QB: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                         BN: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr,
                         PDL: tl.constexpr = 0, SINK: tl.constexpr = 0):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    sp = tl.program_id(2)
    n_heads = tl.num_programs(1) * GROUP
    seq_len = tl.load(sl_ptr + b)  # written before the step, never by the kernel before this one
    lo = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)  # first visible key (sliding window)
    chunk = tl.cdiv(tl.cdiv(seq_len - lo, SPLITS), BN) * BN
    start = lo + sp * chunk
    end = tl.minimum(start + chunk, seq_len)
    if PDL:  # launched early: wait for q and this step's K/V, then let the next kernel launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    hq = tl.arange(0, QB)
    hmask = hq < GROUP
    heads = kvh * GROUP + hq
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * s_qb + heads[:, None] * s_qh + d[None, :], mask=hmask[:, None], other=0.0)
    m_i = tl.full([QB], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([QB], dtype=tl.float32)
    acc = tl.zeros([QB, D], dtype=tl.float32)
    for t0 in range(start, end, BN):
        toks = t0 + tl.arange(0, BN)
        tmask = toks < end
        page = tl.load(bt_ptr + b * s_bt + toks // PAGE, mask=tmask, other=0).to(tl.int64)
        k_off = page * s_kb + (toks % PAGE) * s_ks + kvh * s_kh
        v_off = page * s_vb + (toks % PAGE) * s_vs + kvh * s_vh
        k = tl.load(k_ptr + k_off[:, None] + d[None, :], mask=tmask[:, None], other=0.0)  # [BN, D]
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(tmask[None, :], s * scale, float("-inf"))  # [QB, BN] fp32
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + v_off[:, None] + d[None, :], mask=tmask[:, None], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if SINK and SPLITS == 1:  # the head's sink logit joins the denominator (merged in by _merge_kernel else)
        sk = tl.load(sink_ptr + heads, mask=hmask, other=0.0).to(tl.float32)
        m_f = tl.maximum(m_i, sk)
        l_i = l_i * tl.exp(m_i - m_f) + tl.exp(sk - m_f)
        acc = acc * tl.exp(m_i - m_f)[:, None]
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    o = acc / l_safe[:, None]
    if SPLITS == 1:
        optrs = out_ptr + (b * n_heads + heads[:, None]) * D + d[None, :]
        tl.store(optrs, o.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
    else:
        row = (b * n_heads + heads) * SPLITS + sp  # partials: [B, Hq, SPLITS, D], lse [B, Hq, SPLITS]
        tl.store(op_ptr + row[:, None] * D + d[None, :], o, mask=hmask[:, None])
        tl.store(lse_ptr + row, m_i + tl.log(l_i), mask=hmask)  # -inf for an empty split


@triton.jit
def _merge_kernel(op_ptr, lse_ptr, out_ptr, sink_ptr, xq_ptr, xs_ptr, n_heads, SPLITS: tl.constexpr,
                  SP2: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr = 0, SINK: tl.constexpr = 0,
                  QUANT: tl.constexpr = 0):
    bh = tl.program_id(0)  # b * Hq + h
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    sp = tl.arange(0, SP2)
    d = tl.arange(0, D)
    lse = tl.load(lse_ptr + bh * SPLITS + sp, mask=sp < SPLITS, other=float("-inf"))
    m = tl.max(lse, axis=0)
    if SINK:  # sinks [Hq]: one more logit in the denominator, with no value
        sk = tl.load(sink_ptr + bh % n_heads).to(tl.float32)
        m = tl.maximum(m, sk)
    w = tl.exp(lse - m)  # empty splits weigh 0
    o = tl.load(op_ptr + (bh * SPLITS + sp)[:, None] * D + d[None, :], mask=(sp < SPLITS)[:, None], other=0.0)
    den = tl.sum(w, axis=0)
    if SINK:
        den += tl.exp(sk - m)
    out = tl.sum(o * w[:, None], axis=0) / den
    tl.store(out_ptr + bh * D + d, out.to(out_ptr.dtype.element_ty))
    if QUANT:  # the head's D outputs (D / 32 whole blocks of the row b) as quantize_x(out) writes them
        xr = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        blk = tl.arange(0, D // 32)
        store_quant32(tl.reshape(xr, (D // 32, 8, 4)), xq_ptr + bh * (D // 4), xs_ptr + bh * (D // 8), blk,
                      blk < D // 32)


def default_launch(batch: int, n_kv_heads: int, dim: int, max_context: int) -> tuple[int, SplitLaunch]:
    """The split count and launch of a decode step, as measured on the H200 (bench/results/s35/attn_split/).
    rows = batch x KV heads: programs per split. Splits: enough for 256 programs, or 512 where rows >= 64
    (the 0.5B's 64 rows at depth 4096: 65 -> 46 us a layer); at most 32 for head dims over 64, since the
    merge reads splits x dim floats a head (the 7B's one row at depth 160: 6.6 -> 4.6 us at 32 splits
    rather than 64); at most one per BLOCK_N keys of max_context; one where rows >= 256. A split context
    loop runs two pipeline stages (its few tiles), an unsplit one Triton's default three."""
    rows = max(1, batch * n_kv_heads)
    if rows >= 256:
        return 1, SplitLaunch()
    want = triton.next_power_of_2(max(1, (512 if rows >= 64 else 256) // rows))
    splits = max(1, min(want, 64 if dim <= 64 else 32, triton.cdiv(max_context, BLOCK_N)))
    return splits, SplitLaunch(num_stages=2) if splits > 1 else SplitLaunch()


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           num_splits: int | None = None, window: int = 0,
                           sinks: torch.Tensor | None = None, quant: bool = False,
                           launch: SplitLaunch | None = None):
    """q [B, Hq, D]; caches [num_blocks, page, Hkv, D]; seq_lens >= 1 -> out [B, Hq, D] in q.dtype.
    window > 0: each query sees only its sequence's last `window` keys. sinks [Hq] float32: per-head
    logits in the softmax denominator (gpt-oss). quant=True (opt-in, D % 32 == 0): returns (out,
    quantize_x(out.view(B, Hq * D))), the merge kernel writing the words and scales (one split:
    quantize_x itself). launch: the split kernel's tile, warps and stages (by default default_launch's;
    benchmarks sweep it)."""
    bsz, n_heads, dim = q.shape
    page, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = n_heads // n_kv
    if quant and dim % 32:
        raise ValueError(f"head_dim {dim} is not a multiple of 32")
    if num_splits is None:
        span = block_tables.shape[1] * page
        num_splits, chosen = default_launch(bsz, n_kv, dim, min(span, window) if window > 0 else span)
        launch = launch or chosen
    launch = launch or SplitLaunch()
    if q.stride(2) != 1:  # rows and heads may be apart (column ranges of one q|k|v product): strides
        q = q.contiguous()
    if q.dtype != k_cache.dtype:
        q = q.to(k_cache.dtype)
    out = torch.empty((bsz, n_heads, dim), dtype=q.dtype, device=q.device)
    if num_splits > 1:
        part = torch.empty((bsz, n_heads, num_splits, dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((bsz, n_heads, num_splits), dtype=torch.float32, device=q.device)
    else:
        part = lse = out
    pdl = {"PDL": 1, "launch_pdl": True} if pdl_enabled(q.device) else {}
    grid = (bsz, n_kv, num_splits)
    sink = {"SINK": 1} if sinks is not None else {}
    sink_ptr = sinks if sinks is not None else seq_lens  # never read without SINK
    stages = {"num_stages": launch.num_stages} if launch.num_stages else {}
    _decode_split_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, part, lse, out, sink_ptr, float(scale), int(window),
        q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3], block_tables.stride(0),
        GROUP=group, QB=max(16, triton.next_power_of_2(group)), D=dim, PAGE=page, BN=launch.block_n,
        SPLITS=num_splits, IEEE=q.dtype == torch.float32, num_warps=launch.num_warps, **stages, **pdl, **sink)
    if quant and num_splits == 1:
        return out, quantize_x(out.view(bsz, n_heads * dim))
    xq = torch.empty((bsz, n_heads * dim // 4), dtype=torch.int32, device=q.device) if quant else out
    xs = torch.empty((bsz, n_heads * dim // 32, 4), dtype=torch.float32, device=q.device) if quant else out
    if num_splits > 1:
        _merge_kernel[(bsz * n_heads,)](part, lse, out, sink_ptr, xq, xs, n_heads, SPLITS=num_splits,
                                        SP2=triton.next_power_of_2(num_splits), D=dim, num_warps=1, **pdl,
                                        **sink, **({"QUANT": 1} if quant else {}))
    return (out, (xq, xs)) if quant else out


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMetadata,
                    scale: float, window: int = 0, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Backend for attention.paged_attention: q [T, Hq, D] -> [T, Hq, D]; window > 0: sliding window;
    sinks [Hq] float32 (gpt-oss): the decode kernel and the varlen call (corrected by its log-sum-exp)
    take them; fp32 steps with sinks go to the torch reference."""
    n_seqs = meta.seq_lens.shape[0]
    if meta.max_query_len == 1 and q.shape[0] == n_seqs:
        out = paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale,
                                     window=window, sinks=sinks)
        return out.to(q.dtype)
    if q.dtype in (torch.float16, torch.bfloat16):
        return _prefill_varlen(q, k_cache, v_cache, meta, scale, window, sinks)
    cu, seq_lens = meta.host_lists()
    if sinks is None and window == 0 and all(cu[b + 1] - cu[b] == seq_lens[b] for b in range(n_seqs)):
        return _prefill_no_prefix(q, k_cache, v_cache, meta, cu, scale)
    return paged_attention_torch(q, k_cache, v_cache, meta, scale, window, sinks)


def _prefill_no_prefix(q, k_cache, v_cache, meta, cu, scale):
    """Every sequence's whole context is new: causal SDPA (flash) per sequence over its own K/V."""
    n_kv = k_cache.shape[2]
    flat_k = k_cache.view(-1, n_kv, k_cache.shape[3])
    flat_v = v_cache.view(-1, n_kv, v_cache.shape[3])
    out = torch.empty_like(q)
    for b in range(len(cu) - 1):
        q0, q1 = cu[b], cu[b + 1]
        if q1 == q0:
            continue
        slots = meta.slot_mapping[q0:q1]  # this step wrote token i's K/V at slots[i]
        k, v = flat_k[slots].transpose(0, 1), flat_v[slots].transpose(0, 1)  # [Hkv, n, D]
        o = F.scaled_dot_product_attention(q[q0:q1].transpose(0, 1), k.to(q.dtype), v.to(q.dtype),
                                           is_causal=True, scale=scale, enable_gqa=True)
        out[q0:q1] = o.transpose(0, 1)
    return out


def _kv_index(meta: AttnMetadata, page: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(slots [sum(seq_lens)] int64: flat cache slot of every context token, sequence-major; cu_seqlens_k
    [B+1] int32; max_k), built once per step on the device (no host sync) and memoized on meta."""
    if meta.cache is not None and "kv_index" in meta.cache:
        return meta.cache["kv_index"]
    cu, seq_lens = meta.host_lists()
    n = len(seq_lens)
    if all(cu[b + 1] - cu[b] == seq_lens[b] for b in range(n)):  # no cached prefix: this step's K/V
        res = (meta.slot_mapping, meta.cu_seqlens_q, meta.max_query_len)
    else:
        dev = meta.seq_lens.device
        cu_k = [0]
        for x in seq_lens:
            cu_k.append(cu_k[-1] + x)
        cu_k_dev = torch.tensor(cu_k, dtype=torch.int32).to(dev, non_blocking=True)
        total = cu_k[-1]
        seq_id = torch.repeat_interleave(torch.arange(n, device=dev), meta.seq_lens.long(), output_size=total)
        pos = torch.arange(total, device=dev) - cu_k_dev[:-1].long()[seq_id]  # position within its sequence
        slots = meta.block_tables.long()[seq_id, pos // page] * page + pos % page
        res = (slots, cu_k_dev, max(seq_lens))
    if meta.cache is None:
        meta.cache = {}
    meta.cache["kv_index"] = res
    return res


def _prefill_varlen(q, k_cache, v_cache, meta, scale, window=0, sinks=None):
    """Every sequence in one flash-attention varlen call: q [T, Hq, D] fp16/bf16 -> [T, Hq, D].
    window > 0: flash-attention's local window, keys p - window + 1 .. p (bottom-right aligned)."""
    n_kv, dim = k_cache.shape[2], k_cache.shape[3]
    slots, cu_k, max_k = _kv_index(meta, k_cache.shape[1])
    k = k_cache.view(-1, n_kv, dim)[slots]  # [sum ctx, Hkv, D]
    v = v_cache.view(-1, n_kv, dim)[slots]
    if k.dtype != q.dtype:
        k, v = k.to(q.dtype), v.to(q.dtype)
    out, lse = torch.ops.aten._flash_attention_forward(
        q.contiguous(), k, v, meta.cu_seqlens_q, cu_k, meta.max_query_len, max_k, 0.0, True, False,
        scale=scale, **({"window_size_left": window - 1, "window_size_right": 0} if window > 0 else {}))[:2]
    if sinks is not None:
        out = _sink_correct(out, lse, sinks, meta)
    return out


def _sink_correct(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor,
                  meta: AttnMetadata) -> torch.Tensor:
    """Attention with a sink logit s per head from attention without: softmax over keys + sink is the
    plain softmax times e^lse / (e^lse + e^s), so out * sigmoid(lse - s). out [T, Hq, D]; lse fp32
    [Hq, T] (varlen layout) or [B, Hq, max_q] (padded per sequence); device ops only."""
    t = out.shape[0]
    if lse.dim() == 2:
        row_lse = lse[:, :t].transpose(0, 1)  # [T, Hq]
    else:
        tok = torch.arange(t, device=out.device)
        seq = torch.searchsorted(meta.cu_seqlens_q[1:].long(), tok, right=True).clamp_(max=lse.shape[0] - 1)
        pos = (tok - meta.cu_seqlens_q.long()[seq]).clamp_(0, lse.shape[2] - 1)  # rows past the last: padding
        row_lse = lse[seq, :, pos]  # [T, Hq]
    gate = torch.sigmoid(row_lse.float() - sinks.float()[None, :])
    return (out.float() * gate[:, :, None]).to(out.dtype)
