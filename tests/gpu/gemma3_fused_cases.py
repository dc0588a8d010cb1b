"""QKNormDecoder (orcd/runner/fused_gemma3.py) vs model.forward + compute_logits (dense weights), shared
by the CUDA test and the CPU interpreter run: tiny random gemma3 / qwen3 files with Q5_0 / Q8_0 (at 256
wide also Q4_K / Q6_K) weights, a sliding window of 8 on layer 0 (local, RoPE base 1e4) and none on
layer 1 (global, 1e6), a KV cache filled with random values, and decode steps of sequences at positions
before and beyond the window: 3 rows (the norm-fused GEMVs) and 6 (the batched products)."""

from __future__ import annotations

from pathlib import Path

import torch
from decode_meta import decode_meta
from gguf import GGMLQuantizationType as Q

from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.runner.decode_graphs import pick_step

WINDOW, PAGE = 8, 4
POSITIONS = [30, 5, 17, 8, 63, 2]  # the new token's position per sequence (its context is pos + 1)
SMALL = dict(vocab_size=64, hidden=32, n_layers=2, ffn=64, n_heads=2, n_kv_heads=1, head_dim=16)
WIDE = dict(vocab_size=512, hidden=256, n_layers=2, ffn=512, n_heads=2, n_kv_heads=1, head_dim=128)
MIXED = {"attn_q": Q.Q5_0, "attn_k": Q.Q5_0, "attn_v": Q.Q8_0, "ffn_gate": Q.Q5_0, "ffn_up": Q.Q5_0,
         "default": Q.Q8_0}
K_QUANTS = MIXED | {"attn_output": Q.Q4_K, "ffn_down": Q.Q6_K}
CASES = {  # name -> (arch, dims, qtypes, extra metadata)
    "gemma3-small": ("gemma3", SMALL, MIXED, {"gemma3.final_logit_softcapping": 30.0}),
    "gemma3-wide": ("gemma3", WIDE, K_QUANTS, {}),
    "qwen3-small": ("qwen3", SMALL, MIXED, {}),
}


def write_case(directory: Path, name: str) -> Path:
    arch, dims, qtypes, extra = CASES[name]
    md = {f"{arch}.attention.sliding_window": WINDOW, f"{arch}.attention.sliding_window_pattern": 2,
          **extra} if arch == "gemma3" else extra
    return write_model_gguf(directory / f"{name}.gguf", arch, tied=True, qtypes=qtypes, seed=5,
                            tokenizer_metadata={}, rope_theta=1e6, extra_metadata=md, **dims)


@torch.inference_mode()
def decode_checks(path: Path, device: str, dtype: torch.dtype, rows: int, steps: int = 1,
                  gemv_rows: int | None = None, fused_rows: int | None = None):
    """Yields (rel_err, argmax equal) of the fused step's logits (raw weights) vs the model's (the same
    weights dequantized: plain torch products), per step. gemv_rows, fused_rows: the step's row limits."""
    loaded = load_model(path, device, dtype=dtype, keep_quantized=True, tokenizer=False)
    model = load_model(path, device, dtype=dtype, keep_quantized=False, tokenizer=False).model
    cfg = loaded.cfg
    step = pick_step(loaded.model)
    assert type(step).__name__ == "QKNormDecoder"
    if gemv_rows is not None or fused_rows is not None:  # the step's row limits (QKNormDecoder's args)
        step = type(step)(loaded.model, gemv_rows=gemv_rows, fused_rows=fused_rows)
    width = 24  # blocks per sequence: 96 positions
    kv = KVCache.allocate(cfg, rows * width, PAGE, device, dtype)
    gen = torch.Generator().manual_seed(rows)
    for t in kv.k + kv.v:  # a random context: attention outside the window would change the output
        t.copy_(torch.randn(t.shape, generator=gen).to(dtype))
    tables = torch.randperm(rows * width, generator=gen).view(rows, width).int().to(device)
    pos = torch.tensor(POSITIONS[:rows], device=device)
    for _ in range(steps):
        meta = decode_meta(pos, tables, PAGE)
        ids = torch.randint(0, cfg.vocab_size, (rows,), generator=gen).to(device)
        out = step(ids, pos, meta, kv)
        ref = model.compute_logits(model(ids, pos, meta, kv))
        assert out.shape == ref.shape and out.dtype == torch.float32
        err = float((out.double() - ref.double()).norm() / ref.double().norm())
        yield err, bool(torch.equal(out.argmax(-1), ref.argmax(-1)))
        pos = pos + 1


def kernel_checks(device: str, dtype: torch.dtype):
    """norm_ops' kernels vs the eager layers they replace: yields (name, rel_err)."""
    from orcd.models.layers.attention_ref import write_kv
    from orcd.models.layers.norm import RMSNorm
    from orcd.models.layers.rotary import RotaryEmbedding, apply_rotary
    from orcd.quant.kernels.norm_ops import gelu_mul, norm_add, qk_norm_rope_kv

    g = torch.Generator().manual_seed(9)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    def err(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    t, res, w, w2 = rnd(3, 80), rnd(3, 80), rnd(80), rnd(80)
    want = res + RMSNorm(w, 1e-6)(t)
    want_h = RMSNorm(w2, 1e-6)(want)
    h = norm_add(t, res, w, 1e-6, next_weight=w2)
    yield f"norm_add-{dtype}", max(err(res, want), err(h, want_h))
    gate, up = rnd(5, 96), rnd(5, 96)
    act = torch.nn.functional.gelu(gate, approximate="tanh") * up
    yield f"gelu_mul-{dtype}", err(gelu_mul(gate, up), act)
    q, k, v, qw, kw = rnd(3, 4, 32), rnd(3, 2, 32), rnd(3, 2, 32), rnd(32), rnd(32)
    pos = torch.tensor([0, 7, 300], device=device)
    rot = RotaryEmbedding(32, 1e4, device=device)
    cos, sin = rot.cos_sin(pos, dtype)
    q_ref = apply_rotary(RMSNorm(qw, 1e-6)(q), cos, sin)
    kc_ref = torch.zeros(4, 4, 2, 32, device=device, dtype=dtype)  # [blocks, page, Hkv, D]
    vc_ref = torch.zeros_like(kc_ref)
    slots = torch.tensor([5, 0, 14], device=device)
    write_kv(apply_rotary(RMSNorm(kw, 1e-6)(k), cos, sin), v, kc_ref, vc_ref, slots)
    kc, vc = torch.zeros_like(kc_ref), torch.zeros_like(vc_ref)
    qk_norm_rope_kv(q, k, v, (qw, 1e-6), kw, pos, rot.inv_freq, kc, vc, slots)
    yield f"qk_norm_rope_kv-{dtype}", max(err(q, q_ref), err(kc, kc_ref), err(vc, vc_ref))
