"""gpt-oss's parts against their references: YaRN frequencies vs transformers' rope init, attention
sinks on the paged torch path vs HF's eager formula, and the clamped SwiGLU / top-k router of the MoE."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orcd.models.gpt_oss import yarn_inv_freq
from orcd.models.layers.attention_ref import AttnMetadata, paged_attention_torch
from orcd.models.moe import clamped_swiglu


@pytest.mark.parametrize("truncate", [False, True], ids=["gpt-oss", "llama.cpp-rounded"])
def test_yarn_matches_transformers(truncate: bool) -> None:
    pytest.importorskip("transformers")
    from transformers import GptOssConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": truncate,
            "original_max_position_embeddings": 4096, "rope_theta": 150000.0}
    cfg = GptOssConfig(head_dim=64, rope_parameters=rope, max_position_embeddings=131072)
    want, want_scale = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    got, scale = yarn_inv_freq(64, 150000.0, 32.0, 4096, 32.0, 1.0, truncate=truncate)
    assert torch.equal(got, want) and scale == pytest.approx(want_scale, rel=1e-12)


def _eager_with_sinks(q, k, v, sinks, scale, window):
    """HF's eager_attention_forward for gpt-oss, one sequence: q [n, H, D], k/v [n, H, D]."""
    n = q.shape[0]
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    pos = torch.arange(n)
    allowed = pos[None, :] <= pos[:, None]
    if window:
        allowed &= pos[None, :] > pos[:, None] - window
    scores = scores.masked_fill(~allowed, float("-inf"))
    logits = torch.cat([scores, sinks.reshape(-1, 1, 1).expand(-1, n, 1)], dim=-1)
    probs = torch.softmax(logits - logits.max(-1, keepdim=True).values, dim=-1)[..., :-1]
    return torch.einsum("hqk,khd->qhd", probs, v)


@pytest.mark.parametrize("window", [0, 5])
def test_sinks_match_hf_eager(window: int) -> None:
    torch.manual_seed(0)
    n, h, d, bs = 13, 4, 16, 4
    q, k, v = (torch.randn(n, h, d) for _ in range(3))
    sinks = torch.randn(h) * 2
    blocks = [3, 0, 2, 1]  # non-contiguous pages
    k_cache, v_cache = torch.zeros(4, bs, h, d), torch.zeros(4, bs, h, d)
    slots = torch.tensor([blocks[i // bs] * bs + i % bs for i in range(n)])
    k_cache.view(-1, h, d)[slots], v_cache.view(-1, h, d)[slots] = k, v
    meta = AttnMetadata(torch.tensor([0, n], dtype=torch.int32), torch.tensor([n], dtype=torch.int32),
                        torch.tensor([blocks], dtype=torch.int32), slots, n, n)
    got = paged_attention_torch(q, k_cache, v_cache, meta, d**-0.5, window, sinks)
    torch.testing.assert_close(got, _eager_with_sinks(q, k, v, sinks, d**-0.5, window), rtol=1e-5, atol=1e-6)
    no_sink = paged_attention_torch(q, k_cache, v_cache, meta, d**-0.5, window)
    vanishing = paged_attention_torch(q, k_cache, v_cache, meta, d**-0.5, window, torch.full((h,), -1e4))
    torch.testing.assert_close(vanishing, no_sink)
    assert not torch.allclose(got, no_sink)


def test_clamped_swiglu() -> None:
    gate = torch.tensor([-20.0, 0.0, 1.0, 10.0])
    up = torch.tensor([-10.0, 1.0, 1.0, 10.0])
    want = torch.tensor([-20.0 * torch.sigmoid(torch.tensor(-20.0 * 1.702)).item() * (1 - 7.0),
                         0.0, torch.sigmoid(torch.tensor(1.702)).item() * 2.0,
                         7.0 * torch.sigmoid(torch.tensor(7.0 * 1.702)).item() * 8.0])
    torch.testing.assert_close(clamped_swiglu(gate, up), want)


def test_missing_expert_keys_are_named(tmp_path) -> None:
    from orcd.errors import GGUFError
    from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf
    from orcd.loading.loader import load_model

    dims = dict(vocab_size=320, hidden=64, n_layers=2, ffn=64, n_heads=4, n_kv_heads=2, head_dim=32,
                n_experts=4, n_experts_used=2)
    path = write_gpt_oss_gguf(tmp_path / "m.gguf", extra_metadata={"gpt-oss.expert_used_count": 0}, **dims)
    with pytest.raises(GGUFError, match="expert_used_count"):
        load_model(path, device="cpu", tokenizer=False)
    path = write_gpt_oss_gguf(tmp_path / "n.gguf", extra_metadata={"gpt-oss.expert_used_count": 5}, **dims)
    with pytest.raises(GGUFError, match="5 of 4 experts"):
        load_model(path, device="cpu", tokenizer=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the compiled kernels run (test_gpt_oss_gpu)")
def test_kernel_paths_under_interpreter() -> None:
    """gpt_oss_interp_cases.py under TRITON_INTERPRET=1: the MoE kernels and the fused add+norm path equal
    HF's logits; with batch_invariant set, a token's MoE output is bitwise the same alone and in a batch."""
    pytest.importorskip("transformers")
    from orcd.quant.kernels import triton_available

    if not triton_available():
        pytest.skip("needs triton")
    script = Path(__file__).with_name("gpt_oss_interp_cases.py")
    proc = subprocess.run([sys.executable, str(script)], env=dict(os.environ, TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    assert [r[0] for r in rows] == ["logits-prompt1", "moe-invariant-on", "moe-invariant-off"]
    for name, value, tol in rows:
        assert float(value) < float(tol), name
