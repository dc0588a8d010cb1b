"""A decode-only forward for QK-norm blocks (gemma3, qwen3) with fused kernels, one token per sequence.

Same function as `model.forward` + `compute_logits` for steps where every sequence has one new token.
Per layer, batches of <= GEMV_ROWS rows (the GEMVs fuse the RMSNorm of their input and, without post
norms, the residual add):
  q/k/v GEMVs (attention RMSNorm fused) -> QK-norm + RoPE (the layer's own base) + KV write ->
  paged decode attention (sliding window on local layers; split-K: 1-2 launches) -> o GEMV ->
  [gemma3: res += RMSNorm(t) * w_post] -> gate/up GEMV with GELU(tanh) or SiLU (FFN RMSNorm fused) ->
  down GEMV -> [gemma3: res += RMSNorm(t) * w_post]
= 8-9 launches (gemma3) or 6-7 (qwen3) instead of ~40. The same layer up to `fused_rows` rows takes
fused_linear's batched_fused for its products above GEMV_ROWS (q, k, v then 3 launches; off by default:
not measured on the GPU yet). Larger batches run each product on fused_linear's batched paths and fold
each norm into the kernel that adds to the residual (norm_add / add_rmsnorm), ~13 launches per layer.
gemma3's embeddings are scaled by sqrt(hidden) rounded to the model dtype (as HF does); the LM head is a
raw-block product after the final norm, soft-capped if the file says so.

Meant to be captured by `DecodeGraphs(step_fn=QKNormDecoder(model))`; models it cannot run raise
ValueError at construction (orcd.runner.decode_graphs.pick_step picks the step for a model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from orcd.models.layers.attention import AttnMetadata
from orcd.models.layers.attention_triton import paged_decode_attention
from orcd.models.layers.mlp import GeluGLU
from orcd.quant.kernels.decode_ops import add_rmsnorm
from orcd.quant.kernels.fused_linear import (
    GEMV_GROUPS,
    MM_MAX_N,
    fused_gemv,
    fused_glu,
    fused_linear,
    gemv_plan,
    launch_gemv,
)
from orcd.quant.kernels.gemv_multi import fused_gemv3
from orcd.quant.kernels.norm_ops import gelu_mul, norm_add, qk_norm_rope_kv


def _linear(m, x: torch.Tensor) -> torch.Tensor:
    """A raw-weight QuantLinear without bias applied to x [N, in] -> [N, out]."""
    return fused_linear(x, m.raw, m.out_features, m.in_features, m.qtype)


# Batches of up to this many rows run every layer product on the GEMV kernels (one program per row
# block and token: rows after the first read the layer's ~4 MB of weights from L2); larger ones on
# fused_linear's batched paths. The LM head (178 MB at Gemma 3 270M) always goes through fused_linear.
GEMV_ROWS = 4
# Batches of up to this many rows (<= MM_MAX_N) run the norm-fused layer, its products above GEMV_ROWS on
# batched_fused; kept at GEMV_ROWS until bench/kernels/gemma3_fused.py --fused-rows measures it faster.
FUSED_ROWS = GEMV_ROWS


def _gemv(x: torch.Tensor, m, res: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] @ W.T on the GEMV kernel for any N: added into res [N, out] in place when given."""
    y = res if res is not None else torch.empty((x.shape[0], m.out_features), dtype=x.dtype, device=x.device)
    launch_gemv(x, m.raw, y, int(m.qtype), m.out_features, m.in_features,
                *gemv_plan(int(m.qtype), m.out_features, m.in_features), res=res is not None)
    return y


def _check(model: torch.nn.Module) -> None:
    """ValueError unless every block is a QK-norm block this step runs: raw weights of GEMV types without
    biases, gate and up of one type, full-width RoPE, power-of-two head_dim."""
    for blk in model.blocks:
        a, mlp = blk.attn, blk.mlp
        if a.q_norm is None or getattr(a, "sinks", None) is not None:
            raise ValueError("the QK-norm decode step needs q/k norms and no attention sinks")
        if a.head_dim & (a.head_dim - 1):
            raise ValueError(f"head_dim {a.head_dim} is not a power of two")
        for m in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, mlp.gate, mlp.up, mlp.down, model.lm_head):
            if m.raw is None or m.bias is not None or int(m.qtype) not in GEMV_GROUPS:
                raise ValueError(f"{m.qtype.name}: the QK-norm decode step needs raw GEMV weights, no biases")
        if mlp.gate.qtype != mlp.up.qtype:
            raise ValueError("gate and up of different types")


class QKNormDecoder:
    def __init__(self, model: torch.nn.Module, gemv_rows: int | None = None, fused_rows: int | None = None):
        """model: a gemma3 (post norms, GELU, embedding scale, local/global layers) or qwen3 model whose
        weights were kept quantized. gemv_rows: the most rows on the GEMV kernels (default GEMV_ROWS).
        fused_rows (<= MM_MAX_N; default FUSED_ROWS): the most rows on the norm-fused layer, its products
        above gemv_rows on fused_linear's batched_fused (RMSNorm, residual, GLU inside); above
        fused_rows, the per-product layer."""
        _check(model)
        self.model = model
        self.gemv_rows = GEMV_ROWS if gemv_rows is None else gemv_rows
        self.fused_rows = min(MM_MAX_N, max(self.gemv_rows, FUSED_ROWS if fused_rows is None else fused_rows))
        rot = model.rotary if isinstance(model.rotary, dict) else {False: model.rotary, True: model.rotary}
        d = model.blocks[0].attn.head_dim
        if any(r.rope_dim != d for r in rot.values()):
            raise ValueError("the QK-norm decode step needs full-width rotary")
        # per layer: inv_freq [D/2] float32 of its RoPE base (gemma3: local layers have their own)
        self.inv_freq = [rot[bool(getattr(blk, "local", False))].inv_freq.float().contiguous()
                         for blk in model.blocks]
        self.post = hasattr(model.blocks[0], "post_attn_norm")  # gemma3: RMSNorm of each branch's output
        self.gelu = isinstance(model.blocks[0].mlp, GeluGLU)
        self.softcap = float(getattr(model.cfg, "final_logit_softcap", 0.0))

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B] -> residual stream [B, H] (gemma3: times sqrt(hidden) rounded to the model dtype)."""
        x = self.model.embed(ids)
        scale = getattr(self.model, "embed_scale", None)
        return (x * scale(x.dtype) if scale is not None else x).contiguous()

    def _attention(self, i: int, q, k, v, pos, meta: AttnMetadata, kv) -> torch.Tensor:
        """q [B, Hq*D], k, v [B, Hkv*D] -> attention output [B, Hq*D]; writes this step's K/V."""
        a, b = self.model.blocks[i].attn, q.shape[0]
        q = q.view(b, a.n_heads, a.head_dim)
        k, v = k.view(b, a.n_kv_heads, a.head_dim), v.view(b, a.n_kv_heads, a.head_dim)
        qk_norm_rope_kv(q, k, v, (a.q_norm.weight, a.q_norm.eps), a.k_norm.weight, pos, self.inv_freq[i],
                        kv.k[i], kv.v[i], meta.slot_mapping)
        o = paged_decode_attention(q, kv.k[i], kv.v[i], meta.block_tables, meta.seq_lens, a.scale,
                                   window=a.window)
        return o.view(b, -1)

    def _branch_out(self, m, x: torch.Tensor, res: torch.Tensor, post) -> None:
        """res += post(x @ W.T) (gemma3) or x @ W.T (added inside the product)."""
        if x.shape[0] > self.gemv_rows:  # batched_fused adds into res
            y = _linear(m, x) if self.post else fused_gemv(x, m.raw, m.out_features, m.in_features, m.qtype,
                                                           residual=res)
        else:
            y = _gemv(x, m, res=None if self.post else res)
        if self.post:
            norm_add(y, res, post.weight, post.eps)

    def _layer_fused(self, i: int, res: torch.Tensor, pos, meta: AttnMetadata, kv) -> None:
        """One layer with each norm inside the products that read it (GEMV kernels up to gemv_rows)."""
        blk = self.model.blocks[i]
        a, mlp = blk.attn, blk.mlp
        qkv, nrm = (a.q_proj, a.k_proj, a.v_proj), (blk.attn_norm.weight, blk.attn_norm.eps)
        if res.shape[0] <= self.gemv_rows:  # one launch for the three
            q, k, v = fused_gemv3(res, [(m.raw, m.out_features, m.qtype, None) for m in qkv],
                                  a.q_proj.in_features, norm=nrm)
        else:
            q, k, v = (fused_gemv(res, m.raw, m.out_features, m.in_features, m.qtype, norm=nrm) for m in qkv)
        o = self._attention(i, q, k, v, pos, meta, kv)
        self._branch_out(a.o_proj, o, res, getattr(blk, "post_attn_norm", None))
        g, u = mlp.gate, mlp.up
        act = fused_glu(res, g.raw, u.raw, g.out_features, g.in_features, g.qtype,
                        norm=(blk.ffn_norm.weight, blk.ffn_norm.eps), gelu=self.gelu)
        self._branch_out(mlp.down, act, res, getattr(blk, "post_ffn_norm", None))

    def _add_norm(self, t: torch.Tensor, res: torch.Tensor, post, nxt) -> torch.Tensor:
        """res += post(t) (gemma3) or t; returns nxt(res): one launch."""
        if self.post:
            return norm_add(t, res, post.weight, post.eps, next_weight=nxt.weight)
        return add_rmsnorm(t, res, nxt.weight, nxt.eps)

    def _layer_batched(self, i: int, res: torch.Tensor, h: torch.Tensor, pos, meta: AttnMetadata, kv):
        """One layer for any rows; h = attn_norm(res) -> the next layer's (or the final) norm of res."""
        model = self.model
        blk = model.blocks[i]
        a, mlp = blk.attn, blk.mlp
        q, k, v = (_linear(m, h) for m in (a.q_proj, a.k_proj, a.v_proj))
        o = self._attention(i, q, k, v, pos, meta, kv)
        h = self._add_norm(_linear(a.o_proj, o), res, getattr(blk, "post_attn_norm", None), blk.ffn_norm)
        g, u = _linear(mlp.gate, h), _linear(mlp.up, h)
        act = gelu_mul(g, u) if self.gelu else F.silu(g) * u
        nxt = model.blocks[i + 1].attn_norm if i + 1 < len(model.blocks) else model.norm
        return self._add_norm(_linear(mlp.down, act), res, getattr(blk, "post_ffn_norm", None), nxt)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnMetadata, kv) -> torch.Tensor:
        """ids, pos [B] -> logits [B, V] float32; writes each token's K/V at meta.slot_mapping."""
        model = self.model
        res = self._embed(ids)  # residual stream [B, H], updated in place
        if res.shape[0] <= self.fused_rows:
            for i in range(len(model.blocks)):
                self._layer_fused(i, res, pos, meta, kv)
            # the final RMSNorm as a kernel of its own: inside the head GEMV each program would redo it
            h = add_rmsnorm(None, res, model.norm.weight, model.norm.eps)
        else:
            n0 = model.blocks[0].attn_norm
            h = add_rmsnorm(None, res, n0.weight, n0.eps)
            for i in range(len(model.blocks)):
                h = self._layer_batched(i, res, h, pos, meta, kv)
        logits = _linear(model.lm_head, h).float()
        cap = self.softcap
        return cap * torch.tanh(logits / cap) if cap > 0 else logits
