"""Mixture-of-experts feed-forward (gpt-oss), the simple torch path: a loop over the routed experts.

Router: logits = x @ W_r.T + b_r [T, E]; each token takes its top-k logits and softmaxes over those k
only (llama.cpp's SOFTMAX_WEIGHT gating, HF's GptOssTopKRouter). Expert e: gpt-oss's clamped SwiGLU,
    g = min(x @ Wg_e.T + bg_e, limit),  u = clamp(x @ Wu_e.T + bu_e, -limit, limit)
    y = (g * sigmoid(alpha * g) * (u + 1)) @ Wd_e.T + bd_e
and a token's output is the routing-weighted sum of its k experts' y.

On CUDA with raw MXFP4 experts, `forward_fused` runs the Triton kernels (orcd/quant/kernels/moe_gemv.py
for a few tokens: gate+up per pair, down with the k-slot sum per token; moe_mxfp4.py's expert-grouped
tl.dot above), with no host sync; elsewhere the loop. With `batch_invariant` set (orcd.numerics) the
GEMV runs at every batch size: a token's output then depends on that token alone.

Expert weights are llama.cpp's 3-D tensors ffn_{gate,up,down}_exps [E, out, in] (torch order). Quantized
experts (MXFP4 in gpt-oss files) always stay raw, [E, out, row_bytes] on the device, and only the routed
experts' blocks are dequantized each step, on every device: a token uses k of E experts, so dense copies
would cost E/k times the memory for no gain (gpt-oss-20b: 12 GB raw, ~76 GB as float32 on a CPU). Float
experts (F32/F16/BF16) are converted to the model dtype once.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q
from torch import nn
from torch.nn import functional as F

from orcd import env
from orcd.errors import GGUFError
from orcd.gguf.reader import GGUFTensor
from orcd.quant import dequantize, dequantize_to
from orcd.quant.kernels import triton_available
from orcd.quant.linear import FLOAT_TYPES, raw_to_device
from orcd.quant.mxfp4 import split_blocks_

SWIGLU_ALPHA = 1.702  # gpt-oss's sigmoid slope
SWIGLU_LIMIT = 7.0  # gpt-oss's clamp on the gate (above) and the up projection (both sides)


def kernels_apply(device: torch.device) -> bool:
    """CUDA (or the CPU under TRITON_INTERPRET=1: tests) with triton importable."""
    on = device.type == "cuda" or (device.type == "cpu" and env.triton_interpreter())
    return on and triton_available()


class ExpertLinear(nn.Module):
    """E stacked linears y = x @ W_e.T + b_e; W [E, out, in] dense (float files), raw uint8
    [E, out, row_bytes] (quantized files), or for the kernels MXFP4 split into scales and codes."""

    def __init__(self, weight: GGUFTensor, bias: GGUFTensor | None, device: torch.device, dtype: torch.dtype):
        super().__init__()
        if len(weight.shape) != 3:
            raise GGUFError(f"tensor {weight.name} should be 3-D [experts, out, in], "
                            f"has shape {weight.shape}")
        self.n_experts, self.out_features, self.in_features = weight.shape
        self.qtype, self.dtype = weight.qtype, dtype
        raw = raw_to_device(weight, device).view(self.n_experts, self.out_features, -1)
        keep = weight.qtype not in FLOAT_TYPES
        dense = None if keep else dequantize_to(raw, weight.qtype, tuple(weight.shape), dtype)
        # Where the Triton kernels run, MXFP4 blocks are split in place (scales, then codes: same bytes)
        self.packed = weight.qtype == Q.MXFP4 and kernels_apply(torch.device(device))
        scales, codes = split_blocks_(raw) if self.packed else (None, None)
        self.register_buffer("raw", raw if keep and not self.packed else None, persistent=False)
        self.register_buffer("scales", scales, persistent=False)  # [E, out, in / 32] E8M0, or None
        self.register_buffer("codes", codes, persistent=False)  # [E, out, in / 2] E2M1 pairs, or None
        self.register_buffer("weight", dense, persistent=False)
        b = None
        if bias is not None:
            if tuple(bias.shape) != (self.n_experts, self.out_features):
                raise GGUFError(f"bias {bias.name} has shape {bias.shape}, "
                                f"expected ({self.n_experts}, {self.out_features})")
            b = dequantize(raw_to_device(bias, device), bias.qtype, bias.shape).to(dtype)
        self.register_buffer("bias", b, persistent=False)  # [E, out] or None

    def expert_weight(self, e: int) -> torch.Tensor:
        """W_e [out, in] in self.dtype; quantized, only expert e's blocks are dequantized."""
        if self.weight is not None:
            return self.weight[e]
        return dequantize_to(self.raw[e], self.qtype, (self.out_features, self.in_features), self.dtype)

    def forward(self, x: torch.Tensor, e: int) -> torch.Tensor:
        """x [N, in] (tokens routed to expert e) -> [N, out]."""
        return F.linear(x, self.expert_weight(e), None if self.bias is None else self.bias[e])


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, alpha: float = SWIGLU_ALPHA,
                   limit: float = SWIGLU_LIMIT) -> torch.Tensor:
    """gpt-oss's SwiGLU: gate clamped above, up clamped both sides and offset by one."""
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(gate * alpha) * (up + 1)


class MoE(nn.Module):
    """Top-k routed experts; router: a [E, H] linear with bias (any nn.Module mapping [T, H] -> [T, E])."""

    def __init__(self, router: nn.Module, gate: ExpertLinear, up: ExpertLinear, down: ExpertLinear,
                 top_k: int):
        super().__init__()
        self.router, self.gate, self.up, self.down, self.top_k = router, gate, up, down, top_k
        self.batch_invariant = False  # set per step by orcd.numerics: one kernel for every batch size

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, H] -> (expert ids [T, k] int64, weights [T, k]): softmax over each token's top-k logits.
        Where the kernels apply, top-k and softmax in one launch (orcd/quant/kernels/moe_router.py)."""
        logits = self.router(x)  # [T, E]
        if kernels_apply(x.device):
            from orcd.quant.kernels.moe_router import topk_softmax

            return topk_softmax(logits, self.top_k)
        top, ids = torch.topk(logits, self.top_k, dim=-1)
        return ids, torch.softmax(top, dim=-1)

    def fused(self) -> bool:
        """The Triton kernels of orcd/quant/kernels/moe_mxfp4.py run: MXFP4 experts split for them."""
        return self.gate.packed and self.up.packed and self.down.packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> [T, H]."""
        ids, weights = self.route(x)
        if self.fused():
            return self.forward_fused(x, ids, weights)
        return self.forward_loop(x, ids, weights)

    def forward_fused(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Two kernel launches (gate+up with the SwiGLU, then down times the routing weights, summed over
        the k slots in the GEMV, after it in the grouped path); no host sync, so decode steps can be
        captured in CUDA graphs."""
        from orcd.quant.kernels.moe_gemv import moe_gemv
        from orcd.quant.kernels.moe_mxfp4 import GEMV_MAX_PAIRS, align_by_expert, moe_mxfp4

        t, k = ids.shape
        flat = ids.reshape(-1)  # [T * k] pairs, token-major
        rw = weights.reshape(-1).float()
        g, u, d = self.gate, self.up, self.down
        if self.batch_invariant or flat.numel() <= GEMV_MAX_PAIRS:
            h = moe_gemv(x, flat, (g.scales, g.codes), (u.scales, u.codes), g.bias, u.bias, None, k)  # [P, F]
            return moe_gemv(h, flat, (d.scales, d.codes), None, d.bias, None, rw, k, slots=k)  # [T, H]
        align = align_by_expert(flat, self.gate.n_experts)  # shared by both calls
        h = moe_mxfp4(x, flat, (g.scales, g.codes), (u.scales, u.codes), g.bias, u.bias, None, k,
                      grouped=True, align=align)  # [P, F]
        y = moe_mxfp4(h, flat, (d.scales, d.codes), None, d.bias, None, rw, k, grouped=True, align=align)
        return y.view(t, k, -1).sum(1, dtype=torch.float32).to(x.dtype)

    def forward_loop(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The torch reference: a loop over the routed experts (reads the expert counts to the host)."""
        out = torch.zeros_like(x)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped by expert, tokens ascending
        counts = torch.bincount(flat, minlength=self.gate.n_experts).tolist()
        start = 0
        for e, n in enumerate(counts):  # only the experts some token routed to
            if n == 0:
                continue
            pairs = order[start : start + n]
            start += n
            tok = pairs // self.top_k
            xe = x[tok]
            h = clamped_swiglu(self.gate(xe, e), self.up(xe, e))
            y = self.down(h, e) * weights.reshape(-1)[pairs, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out
