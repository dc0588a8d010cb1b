"""The fused decode step of gpt-oss (one token per sequence), captured by DecodeGraphs like FusedDecoder.

Same function as `model.forward` + `compute_logits` (orcd/models/gpt_oss.py) for decode steps, in fewer
launches. Per layer, for batches of <= GEMV_MAX_N rows, 8 kernels (model.forward: 18):
  1. q, k, v GEMVs with the attention RMSNorm and the biases (gemv_multi.fused_gemv3, any GEMV type);
  2. RoPE (YaRN frequencies; the cos/sin magnitude folded into the softmax scale) + KV write;
  3-4. split-K decode attention with the sinks and, on the local layers, the sliding window;
  5. o GEMV + bias, added into the residual in place;
  6. RMSNorm + router GEMV + bias + top-k + softmax (moe_router.norm_route);
  7. expert gate/up GEMV with the clamped SwiGLU (moe_gemv);
  8. expert down GEMV, the top-k sum weighted by the router, added into the residual in place.
Batches of up to 8 rows (32 (token, expert) pairs, the MoE GEMV's range) take 9: an add+RMSNorm kernel
and one product over q, k and v's rows merged at construction (merge_qkv, where merge_pays; the float
GEMVs with the norm fused stop at GEMV_MAX_N rows), the o GEMV's residual add inside norm_route. Larger
batches replay `model.forward` (expert-grouped MoE kernel).
Models it cannot run raise ValueError at construction.
int8_moe: steps 7-8 with int8 activations (moe_mxfp4_int8.moe_mlp_i8: x and the SwiGLU output quantized
per 32 by quantize_x, dp4a over the E2M1 codes), two launches more per layer; on by default
(INT8_DEFAULT, measured faster on an H100), never by default for float32 models. int8_attn (same
default): Q8_0 q, k, v (one launch, the RMSNorm fused into x's quantization: 2 launches) and o
(+ residual: 2) with int8 x (q8_int8_gemv), at <= GEMV_MAX_N rows.
fuse_quant (FUSE_QUANT_DEFAULT: o): which of the four quantize_x launches per layer are folded into their
producers, bit for bit the same words and scales; parts "o" (by the attention's split merge, int8_attn, at
<= GEMV_MAX_N rows where the attention takes more than one split), "h" (by norm_route, int8_moe), "act"
(the SwiGLU output by the gate/up epilogue, int8_moe); True: all three, False: none. The q, k, v input
keeps its own: its producer is the down GEMV's sum over the top-k pairs.
The LM head at <= GEMV_MAX_N rows takes its own launch where it is Q8_0 (HEAD_LAUNCH_Q8_0).
"""

from __future__ import annotations

import torch

from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.quant.kernels import get_fused_linear
from orcd.quant.kernels.decode_ops import add_rmsnorm, rope_and_write_kv
from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_gemv, fused_linear, launch_gemv
from orcd.quant.kernels.gemv_multi import fused_gemv3
from orcd.quant.kernels.mmq_cuda import OUT_KIND
from orcd.quant.kernels.mmq_cuda import available as mmq_available
from orcd.quant.kernels.mmq_legacy import ROUTED
from orcd.quant.kernels.moe_gemv import moe_gemv
from orcd.quant.kernels.moe_mxfp4 import GEMV_MAX_PAIRS
from orcd.quant.kernels.moe_mxfp4_int8 import moe_mlp_i8
from orcd.quant.kernels.moe_router import norm_route, route_counter
from orcd.quant.kernels.q8_int8_gemv import q8_gemv_i8
from orcd.quant.kernels.xquant import quantize_x

Q8_0 = 8  # GGMLQuantizationType
# The o GEMV's launch (G, BO, warps, K splits) for Q8_0: H100, gpt-oss-20b's 2880 x 4096, one token,
# from a CUDA graph (bench/kernels/gpt_oss_q8_sweep.py, bench/results/gpt_oss_q8_sweep.json): 10.9 us
# against 15.2 us for fused_gemv's plan (8, 4, 1, no split)
O_LAUNCH_Q8_0 = (8, 4, 1, 2)
# The LM head's GEMV launch (G, BO, warps, K splits) for Q8_0 at up to GEMV_MAX_N rows: one H200,
# gpt-oss-20b's 201,088 x 2880 (616 MB), bench/kernels/gpt_oss_i8_sweep.py (bench/results/gpt_oss_s28/):
# 216.7 µs at one row against 254.4 for fused_linear's (8, 4, 1) (2.84 against 2.42 TB/s), 820 against
# 976 at 4 rows
HEAD_LAUNCH_Q8_0 = (8, 8, 1, 1)
# GptOssDecoder's int8_moe / int8_attn when not given (non-float32 models). H100, commit ae555e3, the
# engine on the gpt-oss-20b synth (bench/peers/orcd_side.py, streams 1 / 8 / 32 / 64): float 288 / 751 /
# 2,289 / 4,478 tok/s, int8 323 / 1,057 / 2,371 / 4,415 (bench/results/gpt_oss_engine_*_ae555e3.json);
# tests/gpu/test_moe_int8.py passed there
INT8_DEFAULT = True
# GptOssDecoder's fuse_quant parts when not given. H100, gpt-oss-20b synth, the engine at 1 / 8 streams,
# two calls (bench/kernels/gpt_oss_fused.py --fuse-quant, commits 177b8cc and 7cb8ee2; bench/results/
# gpt_oss_fuse_quant_s18/): none 342 / 1,114 and 340 / 1,112 tok/s; o 346 / 1,113 and 346 / 1,112; o + h
# 347 / 1,113 and 339 / 1,113; all three 352 / 1,044 (the act fold's gate/up at BN 32 loses at 8 rows).
# o alone gained in both (+1.5 % at 1 stream, 24 launches a token fewer); h's gain did not repeat.
# One H200, commit 85bf441 (norm_route per expert), the same script: o 431 / 1,229 tok/s at 1 / 8
# streams, o + act 439 / 1,147 (act then joined at one row). At d6d3c37 (the tuned launches: the plain
# gate/up at 19.5 µs a layer, its quantized form 22.5) the fold lost at one row too: o 532, o + act 524,
# none 524 (bench/results/gpt_oss_s28/): o alone again.
FUSE_QUANT_DEFAULT: frozenset[str] = frozenset({"o"})
FUSE_PARTS = ("o", "h", "act")


def quant_parts(fuse_quant: bool | str | frozenset | None) -> frozenset[str]:
    """GptOssDecoder's fuse_quant -> the set of parts: None the default, True all, False none, "o,h" or a
    set those named."""
    if fuse_quant is None:
        return FUSE_QUANT_DEFAULT
    if isinstance(fuse_quant, bool):
        return frozenset(FUSE_PARTS) if fuse_quant else frozenset()
    names = fuse_quant.split(",") if isinstance(fuse_quant, str) else fuse_quant
    parts = frozenset(p for p in names if p)
    if not parts <= set(FUSE_PARTS):
        raise ValueError(f"fuse_quant: unknown parts {sorted(parts - set(FUSE_PARTS))} (of {FUSE_PARTS})")
    return parts


def _raw_linears(model) -> list:
    """Every QuantLinear the fused step reads raw: q, k, v, o of each layer and the head."""
    attn = [m for blk in model.blocks for m in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj,
                                                 blk.attn.o_proj)]
    return attn + [model.lm_head]


def check_model(model) -> None:
    """ValueError naming what the fused step cannot run (else None)."""
    if not hasattr(model, "blocks") or not all(hasattr(b, "moe") for b in model.blocks):
        raise ValueError("the gpt-oss fused step runs gpt-oss blocks (attention + MoE) only")
    if not all(b.moe.fused() for b in model.blocks):
        raise ValueError("the gpt-oss fused step needs MXFP4 experts split for the kernels")
    for m in _raw_linears(model):
        if m.raw is None or get_fused_linear(m.qtype, m.raw.device) is None:
            raise ValueError(f"no raw fused GEMV for {m.qtype.name} ({m.extra_repr()})")
    a0 = model.blocks[0].attn
    if model.cfg.rope_dim != a0.head_dim or a0.head_dim & (a0.head_dim - 1):
        raise ValueError("fused decode needs full-width rotary and a power-of-two head_dim")
    for blk in model.blocks:
        a = blk.attn
        if len({m.bias is None for m in (a.q_proj, a.k_proj, a.v_proj)}) != 1:
            raise ValueError("q, k, v biases must be all present or all absent")


def _router(moe) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_r [E, H], b_r [E]) dense in the model dtype (zeros for a router without bias)."""
    r = moe.router
    w = r.weight if r.weight is not None else r.dense_weight()
    b = r.bias if r.bias is not None else torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)
    return w.contiguous(), b


def merge_qkv(a) -> tuple[torch.Tensor, torch.Tensor | None, list[int]] | None:
    """q, k and v's raw blocks copied into one [Nq + Nk + Nv, row_bytes] tensor (their biases into one
    [Nq + Nk + Nv]), so that a batch of 5-8 rows runs the three products as one launch: k's and v's 512
    rows alone fill a fraction of the GPU. A copy: on CUDA the loaded raw tensors are views of the file's
    one device copy (DeviceMirror), which stays whole (gpt-oss-20b: 24 x 15.7 MB = 376 MB, 3.1 % of its
    weights). -> (raw, bias or None, [Nq, Nk, Nv]); None where the three differ in type or row width."""
    mods = (a.q_proj, a.k_proj, a.v_proj)
    if len({int(m.qtype) for m in mods}) != 1 or len({m.raw.shape[-1] for m in mods}) != 1:
        return None
    if any(m.raw.dim() != 2 or m.raw.shape[0] != m.out_features for m in mods):
        return None
    bias = torch.cat([m.bias for m in mods]) if mods[0].bias is not None else None
    return torch.cat([m.raw for m in mods]), bias, [m.out_features for m in mods]


def merge_pays(model) -> bool:
    """Whether merged q|k|v products run where they were measured faster (one H200, gpt-oss-20b, 8
    streams: 1,227 -> 1,287 tok/s, bench/results/gpt_oss_s27/): mmq_legacy's tensor-core kernel takes
    them (Q5_0 / Q8_0, a 16-bit model on a device where it compiles)."""
    a, w = model.blocks[0].attn, model.norm.weight
    return int(a.q_proj.qtype) in ROUTED and w.dtype in OUT_KIND and mmq_available(w.device)


class GptOssDecoder:
    def __init__(self, model: torch.nn.Module, int8_moe: bool | None = None, int8_attn: bool | None = None,
                 fuse_quant: bool | str | frozenset | None = None, merged_qkv: bool | None = None):
        check_model(model)
        self.model = model
        default = INT8_DEFAULT and model.norm.weight.dtype != torch.float32  # by the model dtype
        self.int8_moe = default if int8_moe is None else int8_moe
        self.int8_attn = default if int8_attn is None else int8_attn
        self.fuse_quant = quant_parts(fuse_quant)
        self.max_rows = GEMV_MAX_PAIRS // model.blocks[0].moe.top_k  # the MoE GEMV's range
        self.routers = [_router(blk.moe) for blk in model.blocks]  # small: E x H per layer
        self.counter = route_counter(self.max_rows, model.norm.weight.device)  # norm_route's, every layer
        merged = merge_pays(model) if merged_qkv is None else merged_qkv
        self.qkv = [merge_qkv(blk.attn) if merged else None for blk in model.blocks]  # 5-8 rows: 1 product
        self.copy_bytes = sum(r.nbytes + (0 if b is None else b.nbytes) for r, b, _ in filter(None, self.qkv))

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32; writes each token's K/V at meta.slot_mapping."""
        model, b = self.model, ids.shape[0]
        if b > self.max_rows:
            return model.compute_logits(model(ids, pos, meta, kv))
        res = model.embed(ids).contiguous()  # the residual stream [B, H], updated in place
        for i, blk in enumerate(model.blocks):
            delta = self._attention(i, blk, res, pos, meta, kv)
            self._moe(i, blk, res, delta)
        h = add_rmsnorm(None, res, model.norm.weight, model.norm.eps)
        m = model.lm_head
        if h.shape[0] <= GEMV_MAX_N and int(m.qtype) == Q8_0:
            y = torch.empty((h.shape[0], m.out_features), dtype=h.dtype, device=h.device)
            launch_gemv(h, m.raw, y, Q8_0, m.out_features, m.in_features, *HEAD_LAUNCH_Q8_0, bias=m.bias)
            return y.float()
        return fused_linear(h, m.raw, m.out_features, m.in_features, m.qtype, m.bias).float()

    def _qkv(self, i: int, a, nrm, res: torch.Tensor) -> list[torch.Tensor]:
        """q, k, v [B, out_i] of RMSNorm(res) * w: one launch where the norm-fused GEMV takes the batch;
        above that, one product over layer i's merged q|k|v (column ranges of its output)."""
        mods = (a.q_proj, a.k_proj, a.v_proj)
        if self.int8_attn and res.shape[0] <= GEMV_MAX_N and all(int(m.qtype) == Q8_0 for m in mods):
            return q8_gemv_i8(*quantize_x(res, norm=nrm), [(m.raw, m.out_features, m.bias) for m in mods],
                              a.q_proj.in_features, res.dtype)
        if res.shape[0] <= GEMV_MAX_N:
            return fused_gemv3(res, [(m.raw, m.out_features, m.qtype, m.bias) for m in mods],
                               a.q_proj.in_features, norm=nrm)
        h = add_rmsnorm(None, res, *nrm)
        if self.qkv[i] is not None:
            raw, bias, outs = self.qkv[i]
            y = fused_linear(h, raw, sum(outs), a.q_proj.in_features, a.q_proj.qtype, bias)  # [B, Nq+Nk+Nv]
            return list(y.split(outs, dim=1))
        return [fused_linear(h, m.raw, m.out_features, m.in_features, m.qtype, m.bias) for m in mods]

    def _attention(self, i: int, blk, res: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata,
                   kv) -> torch.Tensor | None:
        """res += o_proj(attention(attn_norm(res))) in place (returns None), or, above GEMV_MAX_N rows,
        returns that o_proj output for norm_route to add."""
        a, b = blk.attn, res.shape[0]
        rot = self.model.rotary[blk.local]
        q, k, v = self._qkv(i, a, (blk.attn_norm.weight, blk.attn_norm.eps), res)
        q = q.view(b, a.n_heads, a.head_dim)  # rotated in place
        k, v = k.view(b, a.n_kv_heads, a.head_dim), v.view(b, a.n_kv_heads, a.head_dim)
        rope_and_write_kv(q, k, v, pos, rot.inv_freq, kv.k[i], kv.v[i], meta.slot_mapping)
        scale = a.scale * rot.mscale**2  # q and k both carry YaRN's cos/sin magnitude
        m = a.o_proj
        args = (q, kv.k[i], kv.v[i], meta.block_tables, meta.seq_lens, scale)
        if self.int8_attn and b <= GEMV_MAX_N and int(m.qtype) == Q8_0:
            if "o" in self.fuse_quant and kv.k[i].dtype == res.dtype:  # o quantized by the split merge
                oq = paged_decode_attention(*args, window=a.window, sinks=a.sinks, quant=True)[1]
            else:
                oq = quantize_x(paged_decode_attention(*args, window=a.window, sinks=a.sinks)
                                .to(res.dtype).view(b, -1))
            q8_gemv_i8(*oq, [(m.raw, m.out_features, m.bias)], m.in_features, res.dtype, residual=res)
            return None
        o = paged_decode_attention(*args, window=a.window, sinks=a.sinks).to(res.dtype).view(b, -1)
        if b <= GEMV_MAX_N and int(m.qtype) == Q8_0:
            launch_gemv(o, m.raw, res, Q8_0, m.out_features, m.in_features, *O_LAUNCH_Q8_0, bias=m.bias,
                        res=True)
            return None
        if b <= GEMV_MAX_N:
            fused_gemv(o, m.raw, m.out_features, m.in_features, m.qtype, m.bias, residual=res)
            return None
        return fused_linear(o, m.raw, m.out_features, m.in_features, m.qtype, m.bias)

    def _moe(self, i: int, blk, res: torch.Tensor, delta: torch.Tensor | None) -> None:
        """res (+= delta) += MoE(ffn_norm(res)), in place: route, gate/up, down (+ residual)."""
        moe, (w_r, b_r) = blk.moe, self.routers[i]
        fuse_h = self.int8_moe and "h" in self.fuse_quant  # h quantized by norm_route
        h, ids, rw, *hq = norm_route(res, blk.ffn_norm.weight, blk.ffn_norm.eps, w_r, b_r, moe.top_k, delta,
                                     quant=fuse_h, counter=self.counter)
        flat, k = ids.view(-1), moe.top_k
        g, u, d = moe.gate, moe.up, moe.down
        if self.int8_moe:
            moe_mlp_i8(h, flat, (g.scales, g.codes), (u.scales, u.codes), (d.scales, d.codes),
                       (g.bias, u.bias, d.bias), rw.view(-1), k, res, hq=hq[0] if fuse_h else None,
                       fuse_quant="act" in self.fuse_quant)
            return
        act = moe_gemv(h, flat, (g.scales, g.codes), (u.scales, u.codes), g.bias, u.bias, None, k)  # [P, F]
        moe_gemv(act, flat, (d.scales, d.codes), None, d.bias, None, rw.view(-1), k, slots=k, residual=res)
