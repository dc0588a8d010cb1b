"""The MXFP4 MoE kernels (per-pair GEMV and expert-grouped tl.dot, GLU and down epilogues) and attention
sinks in the Triton attention paths, against their torch references: compiled on CUDA, and on the CPU
through TRITON_INTERPRET=1 (subprocess). Also the expert alignment (plain torch, any device)."""

from __future__ import annotations

import pytest
import torch
from interp_run import check_under_interpreter, interpreter_only

from orcd.quant.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")


@interpreter_only
def test_moe_kernels_under_interpreter():
    check_under_interpreter("moe_cases.py", cases=9, timeout=300)


@interpreter_only
def test_sink_decode_kernel_under_interpreter():
    check_under_interpreter("sink_cases.py", cases=4, timeout=300)


def test_split_blocks_keeps_every_byte():
    """split_blocks_ rewrites MXFP4 rows in place as scales then codes; the 17-byte blocks rebuild exactly."""
    from orcd.quant.mxfp4 import split_blocks_

    raw = torch.randint(0, 256, (3, 5, 4 * 17), dtype=torch.uint8)
    before = raw.clone()
    scales, codes = split_blocks_(raw)
    assert scales.shape == (3, 5, 4) and codes.shape == (3, 5, 64)
    assert scales.untyped_storage().data_ptr() == raw.untyped_storage().data_ptr()  # same bytes
    rebuilt = torch.cat([scales.reshape(-1, 1), codes.reshape(-1, 16)], dim=1).view(3, 5, 68)
    assert torch.equal(rebuilt, before)


def test_align_by_expert():
    from orcd.quant.kernels.moe_mxfp4 import align_by_expert

    ids = torch.tensor([3, 0, 3, 3, 1, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3])  # 16 x expert 3
    rows, bexp = align_by_expert(ids, n_experts=5, bm=4)
    assert rows.numel() == 4 * bexp.numel()
    assert bexp.numel() == 5 + 5  # cdiv(20, 4) + min(5, 20): a bound fixed by shapes
    blocks = rows.view(-1, 4).tolist()
    got = {}
    for e, blk in zip(bexp.tolist(), blocks, strict=True):
        real = [p for p in blk if p < ids.numel()]
        if e < 0:
            assert not real  # blocks past the end are empty
            continue
        assert real == blk[: len(real)] and all(ids[p] == e for p in real)
        got.setdefault(e, []).extend(real)
    assert got == {e: [i for i, x in enumerate(ids.tolist()) if x == e] for e in (0, 1, 3)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_moe_and_sink_kernels_on_cuda(capsys):
    import moe_cases
    from sink_cases import backend_checks, decode_checks

    moe_cases.main()
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert len(lines) == 54
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    rows = [*lines, *decode_checks("cuda", dtypes), *backend_checks("cuda", dtypes)]
    with capsys.disabled():
        for name, err, tol in rows:
            print(name, err, tol)
    for name, err, tol in rows:
        assert float(err) < float(tol), name
