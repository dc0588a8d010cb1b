"""Compile cases of gpt-oss (gpt-oss-20b shapes, bf16): GptOssDecoder's own step on a two-layer stand-in
model (the attributes the step reads, weights torch.empty of the real sizes) with int8 on and off and
fuse_quant on and off, at 1 row (the GEMV paths; CORE) and 8 (the most the MoE GEMV takes; o's output
added by norm_route; EXTENDED), then the MoE paths above 8 rows: topk_softmax and the expert-grouped
MXFP4 kernel."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from cases_attn import cache, meta
from cases_dense import linear
from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.moe_mxfp4 import moe_mxfp4
from orcd.quant.kernels.moe_router import topk_softmax
from orcd.runner.fused_gpt_oss import GptOssDecoder

H, HEADS, KV_HEADS, D, E, TOP_K, FFN, VOCAB = 2880, 64, 8, 64, 32, 4, 2880, 201088  # gpt-oss-20b
BF16 = torch.bfloat16


def experts(out: int, k: int) -> SimpleNamespace:
    """Split MXFP4 experts [E, out, k]: scales [E, out, k / 32], codes [E, out, k / 2] (uint8), bias."""
    return SimpleNamespace(scales=torch.empty((E, out, k // 32), dtype=torch.uint8),
                           codes=torch.empty((E, out, k // 2), dtype=torch.uint8),
                           bias=torch.zeros(E, out, dtype=BF16))


def norm(n: int) -> SimpleNamespace:
    return SimpleNamespace(weight=torch.zeros(n, dtype=BF16), eps=1e-5)


def gpt_oss_layer(local: bool) -> SimpleNamespace:
    """One block as the step reads it: Q8_0 q/k/v/o with biases, sinks, router, split MXFP4 experts."""
    q, kv = HEADS * D, KV_HEADS * D
    attn = SimpleNamespace(q_proj=linear(Q.Q8_0, q, H, True), k_proj=linear(Q.Q8_0, kv, H, True),
                           v_proj=linear(Q.Q8_0, kv, H, True), o_proj=linear(Q.Q8_0, H, q, True),
                           n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=D, window=128 if local else 0,
                           scale=D ** -0.5, sinks=torch.zeros(HEADS))
    router = SimpleNamespace(weight=torch.zeros(E, H, dtype=BF16), bias=torch.zeros(E, dtype=BF16))
    moe = SimpleNamespace(top_k=TOP_K, gate=experts(FFN, H), up=experts(FFN, H), down=experts(H, FFN),
                          router=router, fused=lambda: True)
    return SimpleNamespace(attn=attn, attn_norm=norm(H), ffn_norm=norm(H), moe=moe, local=local)


def gpt_oss_model() -> SimpleNamespace:
    """A sliding-window layer (128 tokens: 2 attention splits) and a global one (16 splits)."""
    rotary = {local: SimpleNamespace(inv_freq=torch.zeros(D // 2), mscale=1.0) for local in (True, False)}
    return SimpleNamespace(blocks=[gpt_oss_layer(True), gpt_oss_layer(False)], rotary=rotary,
                           cfg=SimpleNamespace(rope_dim=D), norm=norm(H), lm_head=linear(Q.Q8_0, VOCAB, H),
                           embed=lambda ids: torch.zeros(ids.shape[0], H, dtype=BF16))


def decode_step(dec: GptOssDecoder, rows: int) -> None:
    kc = cache(KV_HEADS, D)
    dec(torch.zeros(rows, dtype=torch.int64), torch.zeros(rows, dtype=torch.int64), meta(rows),
        SimpleNamespace(k=[kc] * 2, v=[kc] * 2))


def int8_steps(rows: tuple, fuses: tuple) -> None:
    """The int8 step (the default for bf16 models) with fuse_quant on (opt-in) and off."""
    model = gpt_oss_model()
    for fuse in fuses:
        dec = GptOssDecoder(model, int8_moe=True, int8_attn=True, fuse_quant=fuse)
        for n in rows:
            decode_step(dec, n)


def float_step(rows: tuple) -> None:
    """The float step (int8 off: float32 models' default): Q8_0 GEMVs, the float expert GEMV."""
    dec = GptOssDecoder(gpt_oss_model(), int8_moe=False, int8_attn=False)
    for n in rows:
        decode_step(dec, n)


def moe_prefill() -> None:
    """Above the decode rows: the router's top-k + softmax and the expert-grouped kernel (gate/up, down)."""
    t = 64
    topk_softmax(torch.zeros(t, E, dtype=BF16), TOP_K)
    ids, rw = torch.zeros(t * TOP_K, dtype=torch.int64), torch.zeros(t * TOP_K)  # (topk_softmax's: unwritten)
    g, d = experts(FFN, H), experts(H, FFN)
    act = moe_mxfp4(torch.zeros(t, H, dtype=BF16), ids, (g.scales, g.codes), (g.scales, g.codes), g.bias,
                    g.bias, None, TOP_K)
    moe_mxfp4(act, ids, (d.scales, d.codes), None, d.bias, None, rw, TOP_K)


def gpt_oss() -> None:
    """One row through the int8 step with fuse_quant on and off and through the float step; prefill MoE."""
    int8_steps((1,), (True, False))
    float_step((1,))
    moe_prefill()


CORE = {"gpt_oss": gpt_oss}
EXTENDED = {"gpt_oss_8_rows": lambda: (int8_steps((8,), (True, False)), float_step((8,)))}
