"""Two kernels that the Triton interpreter runs but the sm_90 compiler refuses, launched like orcd's
wrappers launch theirs: test_compile_sm90.py requires both groups to FAIL, so a Triton upgrade that made
compile_only stop compiling (or stop reaching ptxas) fails the test instead of passing it silently."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _loop_type_kernel(x_ptr, y_ptr, n, B: tl.constexpr):
    """v: [B] bf16 before the loop, [16] fp32 inside (moe_router's `hv` bug of session 12)."""
    offs = tl.arange(0, B)
    v = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, v)
    for k0 in range(0, n, 16):
        v = tl.load(x_ptr + k0 + tl.arange(0, 16)).to(tl.float32)
    tl.store(y_ptr + tl.arange(0, 16), v)


@triton.jit
def _asm_typo_kernel(x_ptr, y_ptr, B: tl.constexpr):
    """dp4a with its type suffix misspelt: only ptxas reads inline PTX."""
    a = tl.load(x_ptr + tl.arange(0, B))
    r = tl.inline_asm_elementwise("dp4a.s32.s23 $0, $1, $2, $3;", "=r,r,r,r", [a, a, a], dtype=tl.int32,
                                  is_pure=True, pack=1)
    tl.store(y_ptr + tl.arange(0, B), r)


def canary_loop_type() -> None:
    x = torch.zeros(64, dtype=torch.bfloat16)
    _loop_type_kernel[(1,)](x, torch.empty_like(x), 64, B=64)


def canary_asm_typo() -> None:
    x = torch.zeros(64, dtype=torch.int32)
    _asm_typo_kernel[(1,)](x, torch.empty_like(x), B=64)


CANARIES = {"canary_loop_type": canary_loop_type, "canary_asm_typo": canary_asm_typo}
